#!/usr/bin/env bash
# The cost of `llmperf profile` over bare nsys, for the built-in LLM (issue 18).
#
# A = `llmperf -q profile --model MODEL` (nsys capture, export, the configured
#     `nsys stats` reports, ingestion and every report), a new run directory each time;
# B = the exact `nsys profile …` command line A ran (its nsys/cmd.txt), into a copy
#     of that run directory.
# They run in turn, A B A B …, and the ratio is taken pair by pair (the machine's
# speed drifts); the medians are printed. Extra arguments go to A (overrides such
# as `pipeline.nsys.stats=[]`).
#
# Not a generic benchmark timer: such a timer kills what a command leaves in its process
# group, where nsys 2022.4 leaves its agent finishing; the next nsys then hangs with an
# agent spinning at 100% CPU. Here each run ends on its own, and the next waits until
# no nsys agent is left.
#
#   bench/profile_overhead.sh [RUNS] [MODEL] [OVERRIDE...]
#   WORK=${TMPDIR:-/tmp}/llmperf-overhead  LLMPERF=target/release/llmperf
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-7}
MODEL=${2:-llm_tiny}
shift $(($# < 2 ? $# : 2))
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-overhead}
[ -n "${LLMPERF:-}" ] || cargo build --release --locked >&2
BIN=$(realpath "${LLMPERF:-target/release/llmperf}")
rm -rf "$WORK" && mkdir -p "$WORK/a"

quiet_nsys() {
    for _ in $(seq 100); do
        pgrep -f 'nsys --start-agent' >/dev/null || return 0
        sleep 0.1
    done
    echo "an nsys agent is still running after 10 s: $(pgrep -af 'nsys --start-agent')" >&2
    exit 1
}

# Prints the wall seconds of a command, its output discarded, or "hang" when
# nsys 2022.4 hung after the application ended (docs/internals.md, "The nsys
# conversion hang"; ~1 capture in 10 here): then nsys and its agent are killed.
wall() {
    quiet_nsys
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    timeout 60 "$@" </dev/null >/dev/null 2>&1 || rc=$?
    t1=$(date +%s.%N)
    if [ "$rc" -eq 124 ]; then
        pkill -9 -f 'nsys --start-agent' || true
        echo hang
        return
    fi
    [ "$rc" -eq 0 ] || { echo "failed ($rc): $*" >&2; exit 1; }
    echo "$t1 - $t0" | bc -l
}

# Whether llmperf's newest run in $WORK/a met a hang (and so captured twice).
retried() {
    python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(any(d["code"] == "nsys_postprocess_hang" for s in m["stages"] for d in s.get("diagnoses", [])))' \
        "$(ls -d "$WORK"/a/*/ | tail -1)manifest.json"
}

# The bare command: the nsys command line of a first profile run, into its own copy.
first=$("$BIN" -q profile --model "$MODEL" -o "$WORK/a" "$@" </dev/null 2>/dev/null)
cp -r "$first" "$WORK/b"
mapfile -t B < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["stages"][0]["argv"]))' \
    "$first/manifest.json" | sed "s#$first#$WORK/b#g")

echo "A = llmperf -q profile --model $MODEL $*"
echo "B = ${B[*]}"
a=() b=() hangs=0
while [ "${#a[@]}" -lt "$RUNS" ]; do
    ta=$(wall "$BIN" -q profile --model "$MODEL" -o "$WORK/a" "$@")
    [ "$ta" != hang ] && [ "$(retried)" = True ] && ta=hang
    rm -f "$WORK/b/workload/libtorch.json" # so B's workload does all that A's does
    tb=$(wall "${B[@]}")
    if [ "$ta" = hang ] || [ "$tb" = hang ]; then
        hangs=$((hangs + 1))
        echo "pair dropped: nsys hung (A $ta, B $tb)" >&2
        [ "$hangs" -le "$RUNS" ] || { echo "more hangs than runs: is a stray nsys agent spinning?" >&2; exit 1; }
        continue
    fi
    a+=("$ta") b+=("$tb")
    echo "run ${#a[@]}: A $ta s, B $tb s" >&2
done
echo "pairs dropped because nsys hung: $hangs"
python3 - "${a[*]}" "${b[*]}" <<'PY'
import statistics as st, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
r = [x / y for x, y in zip(a, b)]
print(f"{'':10} {'min':>8} {'median':>8} {'max':>8}")
for name, v in (("A wall s", a), ("B wall s", b), ("A/B", r)):
    print(f"{name:10} {min(v):8.3f} {st.median(v):8.3f} {max(v):8.3f}")
print(f"overhead: {100 * (st.median(r) - 1):+.1f}% (median of {len(r)} pairwise ratios; target <= 3%)")
PY
