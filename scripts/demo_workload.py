"""A small NVTX-instrumented PyTorch workload shipped with llmperf.

`make run` profiles it until the built-in libtorch workloads replace it. It
emits the regions scenario of llmperf's specs: ranges A and B, and A1 nested
inside A, each around real tensor work, repeated a few times.
"""
import sys

import torch

nvtx = torch.cuda.nvtx


def work(n: int) -> torch.Tensor:
    x = torch.randn(n, n)
    return x @ x.T


def main(iters: int = 5) -> None:
    torch.manual_seed(0)
    for _ in range(iters):
        nvtx.range_push("A")
        work(256)
        nvtx.range_push("A1")
        work(128)
        nvtx.range_pop()
        nvtx.range_pop()
        nvtx.range_push("B")
        work(192)
        nvtx.range_pop()
    print(f"demo workload: {iters} iterations of A, A::A1, B")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
