"""Holistic Trace Analysis's temporal breakdown of every rank of a directory
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
    tb = TraceAnalysis(trace_dir=trace_dir).get_temporal_breakdown(visualize=False)
    print(json.dumps([
        {
            "rank": int(row["rank"]),
            "idle_us": float(row["idle_time(us)"]),
            "compute_us": float(row["compute_time(us)"]),
            "non_compute_us": float(row["non_compute_time(us)"]),
            "kernel_time_us": float(row["kernel_time(us)"]),
        }
        for _, row in tb.iterrows()
    ]))


if __name__ == "__main__":
    main(sys.argv[1])
