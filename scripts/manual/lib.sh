# Shared by the manual scripts: run llmperf, check what a run directory holds.
# Each check prints PASS/FAIL; `finish` exits non-zero when any failed.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${LLMPERF:-target/release/llmperf}
[ -x "$BIN" ] || { echo "build first: make build (or set LLMPERF)" >&2; exit 2; }
FAILED=0
ROOT=${ROOT:-tmp/manual}
# A GPU here? Then ncu profiles for real; otherwise ranges are only matched (and logged).
if nvidia-smi -L >/dev/null 2>&1; then GPU=1; else GPU=0; fi

check() { # DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "PASS  $what"; else echo "FAIL  $what"; FAILED=1; fi
}

profile() { # ARGS... -> prints the run directory
  "$BIN" profile -q -o "$ROOT" "$@" | tail -1
}

# matched RUN PASS: the ranges ncu's filter matched in a pass (its log lines).
matched() { grep -c 'Skipping invalid capture range' "$1/ncu/$2.log" || true; }

json() { # RUN FILE EXPR: a value from a JSON file of the run (python3 expression on `d`)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1/$2" "$3"
}

finish() {
  if [ "$FAILED" = 0 ]; then echo "all checks passed"; else echo "some checks FAILED"; exit 1; fi
}
