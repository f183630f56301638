"""The Hugging Face Llama of hf_decode.py, eager and as a CUDA graph, for
`llmperf profile --tracer torch` on a GPU host: STEPS eager forwards of a
PROMPT-token batch, each in a record_function range `eager`, then the same
forward captured once with torch.cuda.graph and replayed STEPS times, each
replay in a range `graph` (its kernels come from one cudaGraphLaunch). On a
host without CUDA only the eager part runs.

    python3 scripts/gpu/torch_graphs.py [ARCH] [PROMPT_TOKENS] [STEPS]

Prints one line: arch, device, dtype, the forwards and replays made.
"""
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_decode import DEVICE, DTYPE, config  # noqa: E402


def main(arch: str = "llama", prompt: int = 64, steps: int = 5) -> None:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config(arch)).to(DEVICE, DTYPE).eval()
    ids = torch.randint(0, 4096, (1, prompt), device=DEVICE)
    made = {"eager": 0, "graph": 0}
    with torch.no_grad():
        model(ids, use_cache=False)  # set-up (cuBLAS, attention) outside the ranges
        for _ in range(steps):
            with torch.profiler.record_function("eager"):
                model(ids, use_cache=False)
            made["eager"] += 1
        if DEVICE == "cuda":
            static = ids.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up on a side stream, as torch.cuda.graph asks
                    model(static, use_cache=False)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(static, use_cache=False)
            for _ in range(steps):
                with torch.profiler.record_function("graph"):
                    graph.replay()
                made["graph"] += 1
            torch.cuda.synchronize()
    print(f"torch_graphs: {arch} on {DEVICE} {DTYPE}, {prompt} tokens, made {made}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0] if a else "llama", int(a[1]) if len(a) > 1 else 64, int(a[2]) if len(a) > 2 else 5)
