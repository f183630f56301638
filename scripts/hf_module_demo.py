"""An unmodified Hugging Face program, for `--annotate modules|ops` (no NVTX range of its own):

    llmperf profile --annotate modules --no-ncu -- python3 scripts/hf_module_demo.py [ARCH] [NEW_TOKENS] [COUNTS.json]

Builds a 2-layer causal LM of ARCH (llama, default; qwen2, mistral, mixtral,
gpt2) from a config with random weights, then runs `generate()` for
NEW_TOKENS (default 4) greedy tokens after an 8-token prompt: one prefill
forward, NEW_TOKENS - 1 decode forwards. With COUNTS.json it writes how many
times each module's forward ran, by module path (the outermost module as its
class name), counted by wrapping each module's own forward method: the
oracle of the tests, independent of llmperf's hooks.
"""
import functools
import json
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

ARCH = sys.argv[1] if len(sys.argv) > 1 else "llama"
NEW_TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
COUNTS = sys.argv[3] if len(sys.argv) > 3 else None

SHAPE = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=256, max_position_embeddings=128)
if ARCH == "gpt2":
    SHAPE.update(n_inner=128, bos_token_id=0, eos_token_id=0)
else:
    SHAPE.update(intermediate_size=128, num_key_value_heads=2)
if ARCH == "mixtral":
    SHAPE.update(num_local_experts=4, num_experts_per_tok=2)

torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.for_model(ARCH, **SHAPE)).eval()

calls = {}


def counted(path, forward):
    @functools.wraps(forward)  # generate() and llmperf's phases read the forward's signature
    def run(*args, **kwargs):
        calls[path] = calls.get(path, 0) + 1
        return forward(*args, **kwargs)

    return run


for path, module in model.named_modules():
    module.forward = counted(path or type(model).__name__, module.forward)

prompt = torch.randint(0, SHAPE["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    out = model.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
print("hf_module_demo: %s generated %d tokens" % (type(model).__name__, out.shape[1] - prompt.shape[1]))
if COUNTS:
    with open(COUNTS, "w") as f:
        json.dump(calls, f, indent=1, sort_keys=True)
