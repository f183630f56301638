"""A small NVTX-instrumented PyTorch workload shipped with llmperf.

Every kind of range llmperf's selectors and attribution handle, each around
real tensor work (on the GPU when there is one), repeated ITERS times:

- push/pop `A`, with `A1` nested inside it (`A::A1`), then `B`;
- a start/end range `copy:h2d` (a `:` in its name, as real range names have);
- push/pop `D` in the named domain `Demo` (`Demo@D`), with an ASCII message,
  through the NVTX C library that ships with PyTorch's CUDA wheels
  (libnvToolsExt or libnvtx3interop); skipped, saying so, where none is found.

    python3 scripts/demo_workload.py [ITERS]
"""
import os
import sys

import torch

nvtx = torch.cuda.nvtx
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def work(n: int) -> torch.Tensor:
    x = torch.randn(n, n, device=DEVICE)
    y = x @ x.T
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return y


class Domain:
    """Push/pop ranges in a named NVTX domain with ASCII messages (ncu 2022.3
    matches no range whose message is a registered string), through llmperf's
    own ctypes binding (src/plan/nvtx_ctypes.py); a no-op, saying so, where no
    NVTX C library is found."""

    def __init__(self, name: str):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "plan"))
        from nvtx_ctypes import Domain as Binding

        self.domain = Binding.create(name)
        if self.domain is None:
            print(f"demo workload: no NVTX C library found; the {name} domain range is skipped", file=sys.stderr)

    def push(self, message: str) -> None:
        if self.domain is not None:
            self.domain.push(message)

    def pop(self) -> None:
        if self.domain is not None:
            self.domain.pop()


def main(iters: int = 5) -> None:
    torch.manual_seed(0)
    demo = Domain("Demo")
    # Warm up outside every range, every shape once: ncu's range replay refuses
    # a range that holds a set-up call. On an H200 (ncu 2025.3.1) the first
    # range held the context's creation (cuDevicePrimaryCtxRetain), and, with
    # one shape warmed up, another shape's first kernel launch (loaded lazily:
    # cuKernelSetAttribute).
    for n in (256, 128, 192, 64):
        work(n)
    torch.ones(1 << 16).to(DEVICE).mul_(2)
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
        r = nvtx.range_start("copy:h2d")
        # A kernel beside the copy: ncu 2025.3.1 recorded nothing for a range
        # holding only a pageable host-to-device copy (RecordStatusEmpty).
        torch.ones(1 << 16).to(DEVICE).mul_(2)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        nvtx.range_end(r)
        demo.push("D")
        work(64)
        demo.pop()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    print(f"demo workload: {iters} iterations of A, A::A1, B, copy:h2d (start/end), Demo@D on {DEVICE}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
