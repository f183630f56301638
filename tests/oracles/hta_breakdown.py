"""Holistic Trace Analysis's temporal breakdown and communication-computation
overlap of one PyTorch profiler trace, as JSON on stdout: the oracle
tests/torch.rs holds llmperf's time breakdown against.

    python hta_breakdown.py TRACE

HTA reads every trace in a directory; the trace is linked alone into a
temporary one. HTA's own defaults are kept (the last ProfilerStep left out).
"""
import json
import logging
import os
import sys
import tempfile

logging.disable(logging.WARNING)

from hta.trace_analysis import TraceAnalysis  # noqa: E402


def main(trace):
    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.abspath(trace), os.path.join(d, os.path.basename(trace)))
        a = TraceAnalysis(trace_dir=d)
        tb = a.get_temporal_breakdown(visualize=False)
        ov = a.get_comm_comp_overlap(visualize=False)
    row = tb.iloc[0]
    overlap = float(ov.iloc[0]["comp_comm_overlap_pctg"])
    print(json.dumps({
        "rank": int(row["rank"]),
        "idle_us": float(row["idle_time(us)"]),
        "compute_us": float(row["compute_time(us)"]),
        "non_compute_us": float(row["non_compute_time(us)"]),
        "kernel_time_us": float(row["kernel_time(us)"]),
        "overlap_pct": None if overlap != overlap else overlap,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
