#!/usr/bin/env bash
# Manual test: range replay of the alternate model, the tiny decoder LLM,
# whose ranges are in the NVTX domain `LLM` and nested four deep (prefill and
# decode_all > decode_step > layer_N, lm_head > attn, mlp). Regions come from
# nsys; each pass's expressions and what ncu matched (no GPU) or profiled (GPU).
#
#   scripts/manual/range-alternate-model.sh [ITERS]
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ITERS=${1:-2}
RUN=$(profile --model llm_tiny "infer.iters=$ITERS" infer.cuda_probe=true --replay-mode range)
echo "run directory: $RUN"
check "exit status and manifest" test "$(json "$RUN" manifest.json 'd["status"]')" = ok
check "regions from nsys" test "$(json "$RUN" ncu/plan.json 'd["regions_from"]')" = nsys
check "four passes" test "$(json "$RUN" ncu/plan.json 'len(d["passes"])')" = 4
check "domain first in every expression" test "$(json "$RUN" ncu/plan.json 'all(e.startswith("LLM@") for p in d["passes"] for e in p["expressions"])')" = True
STEPS=7  # infer.max_new_tokens 8: one token from prefill, 7 decode steps
if [ "$GPU" = 1 ]; then
  check "decode_step profiled $((ITERS * STEPS)) times" test "$(json "$RUN" ncu/regions/report.json '[r["inclusive"]["calls"] for r in d["scopes"][0]["regions"] if r["name"] == "decode_all::decode_step"][0]')" = $((ITERS * STEPS))
else
  check "p0 matched prefill + decode_all" test "$(matched "$RUN" p0)" = $((2 * ITERS))
  check "p1 matched every decode_step" test "$(matched "$RUN" p1)" = $((ITERS * STEPS))
  check "p2 matched layers and lm_head" test "$(matched "$RUN" p2)" = $((ITERS * 3 * (1 + STEPS)))
  check "p3 matched attn and mlp" test "$(matched "$RUN" p3)" = $((ITERS * 4 * (1 + STEPS)))
fi
finish
