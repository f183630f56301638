#!/usr/bin/env bash
# Which SIGINT makes nsys keep its capture (docs/internals.md, "Processes")?
#
# Runs bare `nsys profile` (no llmperf) on an application that would run for
# minutes, sends SIGINT 2 s into the capture, either to nsys itself (`nsys`) or
# to the application under nsys-launcher (`app`, what llmperf does), and counts
# the tries whose nsys exited within 30 s with a report on disk. A try whose
# nsys is still there after 30 s is killed: it *ignored* the signal when the
# application still runs, else it *hung* converting the capture (the known
# 2022.4 hang, "The nsys conversion hang").
#
# nsys gets llmperf's options (pipeline.nsys: --trace=cuda,nvtx,osrt --sample=none);
# TRACE=osrt changes what it traces.
#
#   bench/nsys_stop_probe.sh [N] [TARGETS] [APPS]
#     N        tries per target and application (default 5)
#     TARGETS  "nsys app" (default)
#     APPS     "sleep python workload" (default): `sleep 600`, a Python busy
#              loop, the built-in NVTX regions workload ($LLMPERF, release build)
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-5}
TARGETS=${2:-nsys app}
APPS=${3:-sleep python workload}
NSYS=${NSYS:-nsys}
TRACE=${TRACE:-cuda,nvtx,osrt}
BIN=${LLMPERF:-target/release/llmperf}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

app_argv() {
    case "$1" in
    sleep) echo "sleep 600" ;;
    python) echo "python3 -c while(True):pass" ;;
    workload) echo "$BIN -q workload --model nvtx_regions -o $OUT/workload infer.iters=100000000" ;;
    esac
}

# Pids whose parent is an nsys-launcher below $1.
application_of() {
    local root=$1 pid ppid comm
    declare -A parent name
    while read -r pid ppid comm; do
        parent[$pid]=$ppid
        name[$pid]=$comm
    done < <(ps -e -o pid=,ppid=,comm=)
    for pid in "${!parent[@]}"; do
        local p=${parent[$pid]} under=0 q=$pid
        while [ -n "${parent[$q]:-}" ] && [ "$q" != 1 ]; do
            q=${parent[$q]}
            [ "$q" = "$root" ] && under=1 && break
        done
        [ "$under" = 1 ] && [[ "${name[$p]:-}" == nsys-launcher* ]] && echo "$pid"
    done
}

for target in $TARGETS; do
    for app in $APPS; do
        kept=0
        ignored=0
        hung=0
        for i in $(seq "$N"); do
            base="$OUT/$target-$app-$i"
            # shellcheck disable=SC2046
            "$NSYS" profile --trace="$TRACE" --sample=none -o "$base" $(app_argv "$app") \
                >"$base.log" 2>&1 &
            nsys=$!
            sleep 2
            case "$target" in
            nsys) kill -INT "$nsys" ;;
            app) for p in $(application_of "$nsys"); do kill -INT "$p"; done ;;
            esac
            waited=0
            while kill -0 "$nsys" 2>/dev/null && [ "$waited" -lt 300 ]; do
                sleep 0.1
                waited=$((waited + 1))
            done
            if kill -0 "$nsys" 2>/dev/null; then
                if [ -n "$(application_of "$nsys")" ]; then
                    ignored=$((ignored + 1))
                    outcome=ignored
                else
                    hung=$((hung + 1))
                    outcome=hung
                fi
                pkill -KILL -P "$nsys" 2>/dev/null
                kill -KILL "$nsys" 2>/dev/null
                pkill -KILL -f "$(app_argv "$app")" 2>/dev/null
                pkill -KILL -f -- "--session-name=profile-.*-$nsys" 2>/dev/null
            elif [ -s "$base.nsys-rep" ] || [ -s "$base.qdrep" ]; then
                kept=$((kept + 1))
                outcome=report
            else
                outcome="no report"
            fi
            wait "$nsys" 2>/dev/null
            printf '%-4s %-6s try %2d: %s\n' "$target" "$app" "$i" "$outcome"
        done
        echo "SIGINT to $target ($app): report in $kept of $N, signal ignored in $ignored, conversion hung in $hung"
    done
done
