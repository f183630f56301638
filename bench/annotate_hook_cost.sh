#!/usr/bin/env bash
# What the --annotate bootstrap adds to one forward of a 2-layer Llama
# (hidden 128, CPU, transformers from .venv), with no profiler attached:
# the plain forward, the same with two empty global forward hooks (what any
# hook-based annotation pays before doing anything: torch's slow path), and
# with the bootstrap of BOOTSTRAP (default: this tree's). Best of 5 means of
# 300 forwards, in µs. The bootstrap of an earlier commit:
#   BOOTSTRAP=<(git show e29125d:src/plan/annotate_sitecustomize.py) bench/annotate_hook_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cat "${BOOTSTRAP:-src/plan/annotate_sitecustomize.py}" > "$OUT/sitecustomize.py"
cp src/plan/nvtx_ctypes.py "$OUT/_llmperf_nvtx.py"
cat > "$OUT/forward.py" <<'PY'
import sys, time, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
cfg = AutoConfig.for_model("llama", num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
model = AutoModelForCausalLM.from_config(cfg).eval()
ids = torch.randint(0, 1000, (1, 1))
if sys.argv[1] == "empty-hooks":
    torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)
    torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None, always_call=True)
def mean_us(n):
    t = time.perf_counter()
    with torch.no_grad():
        for _ in range(n):
            model(input_ids=ids, use_cache=False)
    return (time.perf_counter() - t) / n * 1e6
mean_us(50)
print("%-12s %7.1f us/forward" % (sys.argv[1], min(mean_us(300) for _ in range(5))))
PY
"$PY" "$OUT/forward.py" plain 2>/dev/null
"$PY" "$OUT/forward.py" empty-hooks 2>/dev/null
env PYTHONPATH="$OUT" LLMPERF_BOOTSTRAP=modules LLMPERF_ANNOTATE=modules \
    LLMPERF_BOOTSTRAP_DOMAIN=llmperf.modules LLMPERF_ANNOTATE_DOMAIN=llmperf.modules \
    "$PY" "$OUT/forward.py" annotated 2>/dev/null
