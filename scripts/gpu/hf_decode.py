"""A Hugging Face causal LM built from its config (random weights, no hub
access), run as prefill + greedy decode with a KV cache, with NVTX ranges
that the program itself does not write: a forward pre/post hook on the top
module marks each forward `prefill` (more than one new token) or `decode`
(one new token, cache in use), and, around every forward, the module path
of each decoder layer's attention and MLP (`layers.N.self_attn`,
`layers.N.mlp`).

    python3 scripts/gpu/hf_decode.py [ARCH] [PROMPT_TOKENS] [NEW_TOKENS]

ARCH: llama (default) | qwen2 | gpt2. Small shapes: 2 layers, hidden 256.
Prints one line: arch, device, dtype, prompt/new tokens, forwards seen.
"""
import sys

import torch
import transformers

nvtx = torch.cuda.nvtx
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


def config(arch: str):
    if arch == "llama":
        return transformers.LlamaConfig(
            hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=4096, max_position_embeddings=1024)
    if arch == "qwen2":
        return transformers.Qwen2Config(
            hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=4096, max_position_embeddings=1024)
    if arch == "gpt2":
        return transformers.GPT2Config(n_embd=256, n_layer=2, n_head=8, vocab_size=4096, n_positions=1024)
    raise SystemExit(f"hf_decode.py: unknown arch {arch!r}; one of llama, qwen2, gpt2")


def phase_hooks(model, counts):
    """prefill/decode ranges around each forward of the top module."""

    def pre(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        name = "prefill" if ids is not None and ids.shape[-1] > 1 else "decode"
        counts[name] = counts.get(name, 0) + 1
        nvtx.range_push(name)

    def post(_module, _args, _kwargs, _out):
        nvtx.range_pop()

    model.register_forward_pre_hook(pre, with_kwargs=True)
    model.register_forward_hook(post, with_kwargs=True)


def module_hooks(model):
    """A range per decoder layer's attention and MLP, named by module path.
    A hook that returns a value replaces the module's input or output, and
    range_push/range_pop return the nesting depth: the hooks return None."""

    def push(name):
        def hook(_module, _args):
            nvtx.range_push(name)

        return hook

    def pop(_module, _args, _output):
        nvtx.range_pop()

    for path, module in model.named_modules():
        parts = path.split(".")
        if len(parts) >= 2 and parts[-1] in ("self_attn", "mlp", "attn") and parts[-3:-2] in (["layers"], ["h"]):
            module.register_forward_pre_hook(push(".".join(parts[-3:])))
            module.register_forward_hook(pop)


def main(arch: str = "llama", prompt: int = 64, new: int = 8) -> None:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config(arch)).to(DEVICE, DTYPE).eval()
    ids = torch.randint(0, 4096, (1, prompt), device=DEVICE)
    # Warm up before any hook: CUDA, cuBLAS and the attention kernels are set
    # up by the first generate, and ncu's range replay cannot capture a range
    # that holds that set-up (cuInit; seen on an H200, ncu 2025.3.1).
    with torch.no_grad():
        model.generate(ids, max_new_tokens=2, do_sample=False, use_cache=True, pad_token_id=0)
    counts = {}
    phase_hooks(model, counts)
    module_hooks(model)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                             pad_token_id=0)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    print(f"hf_decode: {arch} on {DEVICE} {DTYPE}, {prompt} prompt tokens, {out.shape[-1] - prompt} new, "
          f"forwards {counts}, transformers {transformers.__version__}")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0] if a else "llama", int(a[1]) if len(a) > 1 else 64, int(a[2]) if len(a) > 2 else 8)
