#!/usr/bin/env bash
# Real Nsight Compute captures of llmperf's own demo workload on a GPU host:
# range, app-range and kernel replay, each a run directory with the .ncu-rep
# and its raw/details (and, where this ncu has it, session) CSV pages.
#
#   scripts/gpu/validate.sh LLMPERF [OUT]
#
# LLMPERF: a prebuilt llmperf (strip it to carry it: strip -o llmperf target/release/llmperf).
# OUT:     where everything goes (default: gpu-validate/); $OUT on the device machine works.
# Needs: a GPU, python3 with a CUDA PyTorch, ncu (PATH, /usr/local/cuda*/bin or
# /opt/nvidia/nsight-compute/*). nsys is not needed (runs use --no-nsys); no network.
#
# What to commit afterwards (DEVELOPERS.md, "GPU captures"): OUT/ as
# tests/fixtures/gpu/<gpu>-ncu<version>/ with OUT/commands.txt; tests/gpu_fixtures.rs
# then reads every such directory.
set -euo pipefail
LLMPERF=$(realpath "${1:?usage: scripts/gpu/validate.sh LLMPERF [OUT]}")
OUT=$(realpath -m "${2:-gpu-validate}")
cd "$(dirname "$0")/../.."
ITERS=${ITERS:-3}
PY=${PYTHON:-python3}
NCU=$(command -v ncu || ls -d /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1 || true)
[ -x "$NCU" ] || { echo "validate.sh: no ncu found (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-compute)" >&2; exit 4; }
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "validate.sh: $PY has no usable CUDA PyTorch" >&2; exit 4; }
mkdir -p "$OUT/runs"

{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -1)"
  echo "ncu: $NCU ($("$NCU" --version | tail -1))"
  echo "python: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
  echo "llmperf: $("$LLMPERF" --version)"
  echo "iters: $ITERS"
} | tee "$OUT/host.txt"

COMMANDS="$OUT/commands.txt"
: > "$COMMANDS"
run() { # MODE ARGS...: one llmperf profile of the demo, recorded in commands.txt
  local mode=$1; shift
  local argv=("$LLMPERF" profile --no-nsys --replay-mode "$mode" -o "$OUT/runs/$mode"
    "pipeline.ncu.executable=$NCU" "pipeline.ncu.timeout_s=900" "$@" -- "$PY" scripts/demo_workload.py "$ITERS")
  printf '%q ' "${argv[@]}" >> "$COMMANDS"; echo >> "$COMMANDS"
  echo "== $mode"
  "${argv[@]}" || echo "validate.sh: $mode exited $?" | tee -a "$OUT/host.txt"
}
# Every kind of range the demo has: push/pop, nested, start/end (raw: without
# nsys nothing says it is start/end), and a named domain.
REGIONS=(--nvtx-include A --nvtx-include A::A1 --nvtx-include B --nvtx-include expr:copy:h2d --nvtx-include Demo@D)
run range "${REGIONS[@]}"
# Kernel replay: every kernel, each with its NVTX stack.
run kernel
# Application replay runs the whole program once per counter pass and per
# llmperf pass: with the roofline set, 4 passes of this 6-second program took
# over 4 minutes on an H200 (ncu 2025.3.1). The light preset needs few passes.
run app-range profiling/ncu@pipeline.ncu=ncu.light "${REGIONS[@]}"

echo "== summary"
for dir in "$OUT"/runs/*/*/; do
  "$PY" - "$dir" <<'PY'
import json, sys, os
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
print(d, m["status"])
for s in m["stages"]:
    if s["name"].startswith("ncu"):
        print("  %-14s %-8s %s" % (s["name"], s["status"], "; ".join(x["message"] for x in s["diagnoses"])))
p = os.path.join(d, "ncu/regions/report.json")
if os.path.exists(p):
    r = json.load(open(p))
    for reg in r["scopes"][0]["regions"]:
        print("  region %-12s calls %3d  gpu %.3f ms" % (reg["name"], reg["inclusive"]["calls"], reg["inclusive"]["gpu_time_ms"]))
PY
done | tee "$OUT/summary.txt"
