#!/usr/bin/env bash
# One short GPU-host session, as run through the tool library's `device`:
# every step bounded, every result packed into a few archives under OUT
# (the device returns at most 8 files, two folders deep).
#
#   scripts/gpu/session.sh LLMPERF OUT
#
# 1. host facts and an ncu sanity check (one metric of one PyTorch kernel);
# 2. scripts/gpu/validate.sh: the demo workload in range, app-range and kernel
#    replay            -> OUT/validate.tar.gz (commit as tests/fixtures/gpu/<gpu>-ncu<version>/);
# 3. a Hugging Face Llama built from its config (scripts/gpu/hf_decode.py),
#    prefill + decode, in kernel replay and in range replay of prefill/decode
#                      -> OUT/hf.tar.gz;
# 4. --tracer torch (the host has no nsys): the Llama of step 3 eager with
#    module ranges, and one forward as a CUDA graph replayed (scripts/gpu/
#    torch_graphs.py) -> OUT/torch.tar.gz (commit as tests/fixtures/gpu/<gpu>-torch<version>/);
# 5. with FACTS=1, what this ncu offers (sets, sections, tensor-pipe metric names);
#    the sanity check's files in any case -> OUT/ncu-facts.tar.gz.
# The log of everything is OUT/session.log.
set -uo pipefail
LLMPERF=$(realpath "${1:?usage: scripts/gpu/session.sh LLMPERF OUT}")
OUT=$(realpath -m "${2:?usage: scripts/gpu/session.sh LLMPERF OUT}")
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
W=$(mktemp -d)
exec > >(tee "$OUT/session.log") 2>&1
NCU=$(command -v ncu || ls -d /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
export PYTHONUNBUFFERED=1

step() { # NAME SECONDS ARGV...: one bounded step, its exit status logged
  local name=$1 limit=$2; shift 2
  echo "== $name (at most ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 15 -s INT "$limit" "$@"
  echo "== $name: exit $? after $((SECONDS - t0))s"
}

nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.max.sm --format=csv
"$NCU" --version | tail -1
mkdir -p "$W/facts"
step ncu-sanity 60 "$NCU" --metrics gpu__time_duration.sum --csv --print-units base \
  --log-file "$W/facts/sanity.log" --export "$W/facts/sanity" \
  python3 -c 'import torch; x = torch.ones(1 << 20, device="cuda"); print((x * 2).sum().item())'

ITERS=3 step validate "${VALIDATE_S:-200}" scripts/gpu/validate.sh "$LLMPERF" "$W/gpu-validate"
# ncu 2025.3 reports embed each kernel's module (49 MB for the demo's kernel
# replay): the archives hold ncu's CSV pages, not the .ncu-rep files.
tar czf "$OUT/validate.tar.gz" --exclude='*.ncu-rep' -C "$W" gpu-validate

HF=(python3 scripts/gpu/hf_decode.py llama 64 8)
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | head -1)"
  echo "ncu: $NCU ($("$NCU" --version | tail -1))"
  echo "python: $(python3 -c 'import torch, transformers; print(torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)')"
  echo "llmperf: $("$LLMPERF" --version)"
} > "$W/hf-host.txt"
mkdir -p "$W/hf"
mv "$W/hf-host.txt" "$W/hf/host.txt"
hf() { # MODE ARGS...: llmperf profile of hf_decode.py, recorded in hf/commands.txt
  local mode=$1; shift
  local argv=("$LLMPERF" profile --no-nsys --replay-mode "$mode" -o "$W/hf/runs/$mode"
    "pipeline.ncu.executable=$NCU" profiling/ncu@pipeline.ncu=ncu.light "$@" -- "${HF[@]}")
  printf '%q ' "${argv[@]}" >> "$W/hf/commands.txt"; echo >> "$W/hf/commands.txt"
  step "hf-$mode" "${HF_S:-60}" "${argv[@]}"
}
# The light preset (SpeedOfLight, gpu__time_duration): with the roofline set,
# kernel replay of every launch took over 110 s and its archive was too large
# to return (H200, ncu 2025.3.1).
# Only the kernels inside prefill/decode (an NVTX filter in kernel replay): the
# warm-up generate() alone launched more than 97 kernels.
hf range --nvtx-include prefill --nvtx-include decode
hf kernel --nvtx-include prefill --nvtx-include decode pipeline.ncu.ncu_cli.launch_count=120
tar czf "$OUT/hf.tar.gz" --exclude='*.ncu-rep' -C "$W" hf

mkdir -p "$W/torch"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' > "$W/torch/host.txt"
traced() { # NAME ARGS...: llmperf profile --tracer torch, recorded in torch/commands.txt
  local name=$1; shift
  local argv=("$LLMPERF" profile --tracer torch -o "$W/torch/runs/$name" "$@")
  printf '%q ' "${argv[@]}" >> "$W/torch/commands.txt"; echo >> "$W/torch/commands.txt"
  step "torch-$name" "${TORCH_S:-90}" "${argv[@]}"
}
traced eager --annotate modules annotate.depth=2 -- "${HF[@]}"
traced graphs -- python3 scripts/gpu/torch_graphs.py llama 64 5
tar czf "$OUT/torch.tar.gz" -C "$W" torch

[ -n "${FACTS:-}" ] && {
  "$NCU" --list-sets > "$W/facts/sets.txt" 2>&1
  "$NCU" --list-sections > "$W/facts/sections.txt" 2>&1
  timeout 30 "$NCU" --query-metrics --chip "$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -qi h100\\\|h200 && echo gh100 || echo unknown)" \
    > "$W/facts/query-metrics.txt" 2>&1
  grep -i tensor "$W/facts/query-metrics.txt" > "$W/facts/tensor-metrics.txt"
}
tar czf "$OUT/ncu-facts.tar.gz" -C "$W" facts
ls -la "$OUT"
