#!/usr/bin/env python3
"""The peers of bench/ncu_ingest.sh: the same job as `llmperf import ncu` at its
smallest (launches and GPU time per kernel name from an ncu details CSV), done
with Python's csv module or with pandas. llmperf also rolls up every metric
per region; these do only the durations, so the comparison favours them.

    ncu_peers.py csv|pandas FILE.csv   -> prints JSON {kernel: [launches, duration_ns]}
"""
import csv
import json
import sys

NS = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def with_csv(path):
    """Rows of a launch are contiguous: keep its kernel and both durations until the ID changes."""
    out = {}
    with open(path, newline="") as f:
        rows = csv.reader(f)
        head = next(rows)
        i = {h: n for n, h in enumerate(head)}
        iid, ik, isec, iname, iunit, ival = (i[c] for c in ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"))
        current, kernel, gpu_time, sol = None, None, None, None

        def close():
            if current is not None:
                e = out.setdefault(kernel, [0, 0.0])
                e[0] += 1
                e[1] += gpu_time if gpu_time is not None else (sol or 0.0)

        for r in rows:
            if len(r) <= ival:
                continue
            if r[iid] != current:
                close()
                current, kernel, gpu_time, sol = r[iid], r[ik], None, None
            name = r[iname]
            if name == "gpu__time_duration.sum":
                gpu_time = float(r[ival].replace(",", "")) * NS[r[iunit]]
            elif name == "Duration" and r[isec].startswith("GPU Speed Of Light"):
                sol = float(r[ival].replace(",", "")) * NS[r[iunit]]
        close()
    return out


def with_pandas(path):
    import pandas as pd

    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    launches = df.groupby("Kernel Name")["ID"].nunique()
    gpu = df["Metric Name"] == "gpu__time_duration.sum"
    sol = (df["Metric Name"] == "Duration") & df["Section Name"].str.startswith("GPU Speed Of Light")
    d = df[gpu | sol].copy()
    d["ns"] = d["Metric Value"].str.replace(",", "", regex=False).astype(float) * d["Metric Unit"].map(NS)
    d["rank"] = (d["Metric Name"] != "gpu__time_duration.sum").astype(int)
    # One duration per launch: gpu__time_duration.sum when the launch has it.
    per_launch = d.sort_values("rank", kind="stable").drop_duplicates("ID")
    total = per_launch.groupby("Kernel Name")["ns"].sum()
    return {k: [int(launches[k]), float(total.get(k, 0.0))] for k in launches.index}


if __name__ == "__main__":
    mode, path = sys.argv[1:3]
    result = with_csv(path) if mode == "csv" else with_pandas(path)
    json.dump(result, sys.stdout)
