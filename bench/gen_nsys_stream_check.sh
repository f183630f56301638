#!/usr/bin/env bash
# Checks bench/gen_nsys_stream.py against the shared generator it streams: the same
# arguments must give the same rows in every table (compared as SQL dumps, row order
# included) and the same ground truth (every section but the output file's bytes and
# hash), and says each one's time and peak memory.
#
#   bench/gen_nsys_stream_check.sh [RANGES] [KERNELS] [GENERATOR OPTIONS...]   (default 1000000 1000000)
#   SHARED_BENCH=../shared/bench  WORK=${TMPDIR:-/tmp}/llmperf-gencheck (deleted after)
set -euo pipefail
cd "$(dirname "$0")/.."
RANGES=${1:-1000000}
KERNELS=${2:-1000000}
shift $(($# < 2 ? $# : 2))
SHARED_BENCH=${SHARED_BENCH:-../shared/bench}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-gencheck}
rm -rf "$WORK" && mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
args=(--ranges "$RANGES" --kernels "$KERNELS" "$@")
/usr/bin/time -f 'shared generator:    %e s, peak %M KiB' \
    python3 "$SHARED_BENCH/gen_nsys_sqlite.py" "${args[@]}" --out "$WORK/shared.sqlite" --expect "$WORK/shared.json" >/dev/null
SHARED_BENCH=$SHARED_BENCH /usr/bin/time -f 'streaming generator: %e s, peak %M KiB' \
    python3 bench/gen_nsys_stream.py "${args[@]}" --out "$WORK/stream.sqlite" --expect "$WORK/stream.json" >/dev/null
python3 - "$WORK" <<'PY'
import hashlib, json, sqlite3, sys
work = sys.argv[1]
dbs = [sqlite3.connect(f"{work}/{n}.sqlite") for n in ("shared", "stream")]
tables = [sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")) for db in dbs]
assert tables[0] == tables[1], "the two files have different tables"
for t in tables[0]:
    digests = []
    for db in dbs:
        h, n = hashlib.sha256(), 0
        for row in db.execute(f'SELECT * FROM "{t}" ORDER BY rowid'):
            h.update(repr(row).encode())
            n += 1
        digests.append((n, h.hexdigest()))
    assert digests[0] == digests[1], f"{t}: {digests}"
expect = [json.load(open(f"{work}/{n}.json")) for n in ("shared", "stream")]
for e in expect:
    del e["output"]
assert expect[0] == expect[1], [k for k in expect[0] if expect[0][k] != expect[1].get(k)]
print(f"same rows in all {len(tables[0])} tables and the same ground truth")
PY
