# Shared by the bench/ scripts (sourced): timing a command, the median of
# runs, and the generator's nsys export. Expects WORK (and SHARED_BENCH for
# nsys_db) to be set.

# Prints "seconds peak_rss_kib" of a command (GNU time), its output discarded.
timed() {
    /usr/bin/time -f '%e %M' -o "$WORK/time.txt" "$@" >/dev/null 2>&1
    cat "$WORK/time.txt"
}

# median_of N CMD...: runs CMD (which prints "seconds peak_kib") N times; prints the
# median seconds and the largest peak.
median_of() {
    local n=$1
    shift
    for _ in $(seq "$n"); do "$@"; done | python3 -c '
import statistics, sys
runs = [line.split() for line in sys.stdin]
print(statistics.median(float(t) for t, _ in runs), max(int(float(m)) for _, m in runs))'
}

# nsys_db RANGES KERNELS: sets DB to the shared generator's export of that size
# (with its ground truth beside it, ${DB%.sqlite}.json), written in bounded memory by
# bench/gen_nsys_stream.py the first time and kept in $WORK.
nsys_db() {
    DB="$WORK/nsys_${1}_${2}.sqlite"
    mkdir -p "$WORK"
    if [ ! -f "$DB" ]; then
        [ -f "$SHARED_BENCH/gen_nsys_sqlite.py" ] || { echo "need $SHARED_BENCH/gen_nsys_sqlite.py (set SHARED_BENCH)" >&2; exit 1; }
        SHARED_BENCH=$SHARED_BENCH python3 bench/gen_nsys_stream.py --ranges "$1" --kernels "$2" \
            --out "$DB" --expect "${DB%.sqlite}.json"
    fi
}
