"""Holistic Trace Analysis's temporal breakdown and kernel breakdown (summed
time per kernel type) of every rank of a directory
of PyTorch profiler traces, as a JSON list on stdout: the oracle
tests/perfetto.rs holds `llmperf export perfetto`'s files against.

    HTA_DISABLE_NS_ROUNDING=1 python hta_ranks.py DIR
"""
import json
import logging
import sys

logging.disable(logging.WARNING)

from hta.trace_analysis import TraceAnalysis  # noqa: E402


def main(trace_dir):
    analysis = TraceAnalysis(trace_dir=trace_dir)
    tb = analysis.get_temporal_breakdown(visualize=False)
    # Every kernel, copy and memset, summed by HTA's kernel type per rank.
    _, kernels = analysis.get_gpu_kernel_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=1_000_000, include_memory_kernels=True
    )
    by_type = kernels.groupby(["rank", "kernel_type"])["sum (us)"].sum()
    print(json.dumps([
        {
            "rank": int(row["rank"]),
            "idle_us": float(row["idle_time(us)"]),
            "compute_us": float(row["compute_time(us)"]),
            "non_compute_us": float(row["non_compute_time(us)"]),
            "kernel_time_us": float(row["kernel_time(us)"]),
            "kernel_types_us": {
                kind: float(us) for (rank, kind), us in by_type.items() if rank == row["rank"]
            },
        }
        for _, row in tb.iterrows()
    ]))


if __name__ == "__main__":
    main(sys.argv[1])
