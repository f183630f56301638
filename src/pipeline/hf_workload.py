"""llmperf --model hf: a Hugging Face causal LM, prefill + greedy decode with a KV cache.

llmperf writes this file into the run directory (workload/hf_workload.py) and
runs `PYTHON hf_workload.py REQUEST.json REPLY.json` (pipeline/hf.rs). The
request says which architecture (transformers' model_type and config fields,
or a local checkpoint folder), the device, dtype and loop sizes; the reply
holds what was measured, per region, and the shape the model really has.

transformers builds the model from its config with random weights (the
loader and the modelling code are the real ones; no Hub access), or loads a
local checkpoint with local_files_only. Each measured iteration is one
generation: `prefill` (the prompt, one forward that fills the cache), then
`decode_all` holding `decode_step` ranges (one new token each, with the
cache), in the NVTX domain of the request, the same regions as the built-in
decoder. On CUDA every region boundary synchronizes, so a region's wall time
covers its kernels.
"""
import json
import os
import sys
import time


class Failure(Exception):
    def __init__(self, message, hint):
        super().__init__(message)
        self.hint = hint


def imports():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise Failure(
            "%s cannot import %s: %s" % (sys.executable, e.name or "a module", e),
            "install them: %s -m pip install torch -r scripts/requirements-hf.txt "
            "(make setup does this for the project's .venv), or point model.python at an interpreter "
            "that has torch and transformers (model.python=.venv/bin/python)" % sys.executable,
        )
    return torch, transformers


def resolve_device(torch, name):
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise Failure(
            "device %s requested but torch %s sees no CUDA device" % (name, torch.__version__),
            "use device=cpu or device=auto",
        )
    return torch.device(name)


def build(torch, transformers, req, device, dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    if req["path"]:
        path = req["path"]
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise Failure(
                "model.path %s has no config.json" % path,
                "point model.path at a local checkpoint folder (config.json and *.safetensors)",
            )
        config = AutoConfig.from_pretrained(path, local_files_only=True, **req["config"])
        model = AutoModelForCausalLM.from_pretrained(path, config=config, local_files_only=True, dtype=dtype)
        model = model.to(device)
    else:
        try:
            config = AutoConfig.for_model(req["model_type"], **req["config"])
        except ValueError as e:
            raise Failure(
                "transformers %s does not know model_type %r: %s" % (transformers.__version__, req["model_type"], e),
                "set the preset's model_type to one transformers knows (llama, qwen2, mistral, mixtral, gpt2, ...)",
            )
        with device:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return config, model.eval()


def shape_of(config):
    """The numbers the FLOPs and bytes formulas need, in one naming for every architecture."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    ffn = getattr(config, "intermediate_size", None)
    if ffn is None:  # GPT-2: n_inner, None meaning 4 x hidden
        ffn = getattr(config, "n_inner", None) or 4 * hidden
    return {
        "layers": config.num_hidden_layers,
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "heads": heads,
        "kv_heads": getattr(config, "num_key_value_heads", None) or heads,
        "head_dim": getattr(config, "head_dim", None) or hidden // heads,
        "vocab_size": config.vocab_size,
        "experts": getattr(config, "num_local_experts", None) or 0,
        "experts_per_token": getattr(config, "num_experts_per_tok", None) or 0,
        "tied_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
    }


def calibrate(torch, dtype):
    """This CPU's reachable peaks, outside every range (the built-in workloads' method)."""
    n = 1024
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)

    def best(runs, f):
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return min(times)

    matmul_s = best(5, lambda: a.matmul(b))
    elems = 64 << 20
    src = torch.ones(elems)
    dst = torch.zeros(elems)
    copy_s = best(3, lambda: dst.copy_(src))
    name = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(dtype, "f32")
    return {
        "method": "best of 5 %dx%d %s matmuls and of 3 copies of 256 MiB, in PyTorch" % (n, n, name),
        "matmul_flops_per_s": 2.0 * n * n * n / matmul_s,
        "copy_bytes_per_s": 2.0 * elems * 4 / copy_s,
    }


class Regions:
    """NVTX ranges and wall time per region path, recorded only while measuring."""

    def __init__(self, torch, device, domain_name, nvtx):
        self.sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
        self.domain = None
        if os.environ.get("LLMPERF_BOOTSTRAP_TRACER") == "torch":
            # `profile --tracer torch`: the phases as record_function ranges in its trace.
            from _llmperf_nvtx import Records

            self.domain = Records(torch)
        elif nvtx:
            from _llmperf_nvtx import Domain

            self.domain = Domain.create(domain_name)
            if self.domain is None:
                raise Failure(
                    "no NVTX C library (libnvToolsExt, libnvtx3interop) next to torch",
                    "install torch from its wheel (it depends on nvidia-nvtx), or run with --no-nvtx",
                )
        self.path = []
        self.recording = False
        self.samples = {}
        self.per_repeat = {}
        self.repeat = 0

    def mark(self, name, body):
        """A range around `body` that records no time (the warm-up)."""
        if self.domain is not None:
            self.domain.push(name)
        try:
            return body()
        finally:
            if self.domain is not None:
                self.domain.pop()

    def run(self, name, body):
        if not self.recording:
            return body()
        self.sync()
        if self.domain is not None:
            self.domain.push(name)
        self.path.append(name)
        start = time.perf_counter()
        try:
            out = body()
            self.sync()
        finally:
            elapsed_ms = (time.perf_counter() - start) * 1e3
            key = "::".join(self.path)
            self.path.pop()
            if self.domain is not None:
                self.domain.pop()
        self.samples.setdefault(key, []).append(elapsed_ms)
        parts = self.per_repeat.setdefault(key, [])
        while len(parts) <= self.repeat:
            parts.append([])
        parts[self.repeat].append(elapsed_ms)
        return out


def cache_keyword(model):
    """The forward's cache argument: `cache` (transformers 5.x), else `past_key_values`."""
    import inspect

    names = inspect.signature(model.forward).parameters
    return "cache" if "cache" in names else "past_key_values"


def generate(torch, model, prompt, new_tokens, regions, keyword):
    """Greedy generation with the model's own cache: one prefill, new_tokens - 1 decode steps."""

    def forward(ids, cache):
        out = model(input_ids=ids, use_cache=True, **{keyword: cache})
        return out.logits[:, -1:].argmax(-1), out.get("cache", out.get("past_key_values"))

    token, cache = regions.run("prefill", lambda: forward(prompt, None))

    def decode():
        nonlocal token, cache
        for _ in range(new_tokens - 1):
            token, cache = regions.run("decode_step", lambda: forward(token, cache))

    regions.run("decode_all", decode)


def main(request_path, reply_path):
    with open(request_path) as f:
        req = json.load(f)
    torch, transformers = imports()
    device = resolve_device(torch, req["device"])
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[req["dtype"]]
    torch.manual_seed(req["seed"])
    config, model = build(torch, transformers, req, device, dtype)
    shape = shape_of(config)
    batch, prompt_len, new_tokens = req["batch_size"], req["prompt_len"], req["max_new_tokens"]
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and prompt_len + new_tokens > limit:
        raise Failure(
            "infer.prompt_len %d + infer.max_new_tokens %d exceed the model's max_position_embeddings %d"
            % (prompt_len, new_tokens, limit),
            "shorten the prompt or the generation",
        )
    generator = torch.Generator().manual_seed(req["seed"])
    prompt = torch.randint(0, shape["vocab_size"], (batch, prompt_len), generator=generator).to(device)
    regions = Regions(torch, device, req["domain"], req["nvtx"])
    keyword = cache_keyword(model)
    with torch.no_grad():
        # Warm-up in a `warmup` range: what runs there (module ranges of
        # --annotate) is kept apart from the measured prefill and decode steps.
        def warm_up():
            for _ in range(req["warmup_iters"]):
                generate(torch, model, prompt, new_tokens, regions, keyword)

        if req["warmup_iters"] > 0:
            regions.mark("warmup", warm_up)
        regions.recording = True
        start = time.perf_counter()
        for r in range(req["repeat"]):
            regions.repeat = r
            for _ in range(req["iters"]):
                generate(torch, model, prompt, new_tokens, regions, keyword)
        measured_ms = (time.perf_counter() - start) * 1e3
        regions.recording = False
        # A CUDA call outside every range: ncu's range replay ends a range at
        # the first CUDA call after it, so without one the last never ends.
        regions.sync()
    reply = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "model_class": type(model).__name__,
        "model_type": config.model_type,
        "shape": shape,
        "device": str(device) if device.type == "cuda" else "cpu",
        "measured_ms": measured_ms,
        "samples": regions.samples,
        "per_repeat": regions.per_repeat,
        "calibration": calibrate(torch, dtype) if device.type == "cpu" else None,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    with open(reply_path, "w") as f:
        json.dump(reply, f)


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2])
    except Failure as e:
        with open(sys.argv[2], "w") as f:
            json.dump({"error": str(e), "hint": e.hint}, f)
        sys.exit(3)
