#!/usr/bin/env python3
"""Write a job directory of N ranks as `llmperf profile --rank-from-env` leaves it, for
bench/merge_ranks.sh: ranks/<rank>/rank.json and ranks/<rank>/nsys/regions.json (llmperf's own
formats; no profiler output is imitated). Each rank has the same region tree - a decoder's
prefill and decode steps, LAYERS layers of attention and MLP operators - with times that differ
by rank (rank 7 is slow), every region with its kernels, and one process on its own device.

Ground truth for the check: ground_truth.json holds, per region path, each rank's inclusive ns.

    bench/gen_ranks.py OUT_JOB_DIR [--ranks 1000] [--layers 24] [--seed 1]
"""
import argparse, json, os, random


def tree(layers):
    ops = ["attn::qkv", "attn::sdpa", "attn::out", "mlp::up", "mlp::act", "mlp::down", "norm1", "norm2"]
    paths = [["prefill"], ["decode_all"], ["decode_all", "decode_step"]]
    for stage in (["prefill"], ["decode_all", "decode_step"]):
        for l in range(layers):
            layer = stage + [f"layer_{l}"]
            paths.append(layer)
            for op in ops:
                paths.append(layer + [op])
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    paths = tree(a.layers)
    truth = {}
    for rank in range(a.ranks):
        d = os.path.join(a.out, "ranks", str(rank))
        os.makedirs(os.path.join(d, "nsys"), exist_ok=True)
        pid = 10000 + rank
        slow = 1.3 if rank == 7 else 1.0
        regions = []
        for p in paths:
            leaf = len(p) == 4 or (len(p) == 3 and p[0] == "prefill")
            base = 2_000_000 if leaf else 40_000_000 // max(len(p), 1)
            ns = int(base * slow * rng.uniform(0.95, 1.05))
            gpu = int(ns * 0.8)
            kernels = [
                {"name": f"void gemm_{len(p)}<{i}>(Params)", "calls": 10, "gpu_time_ns": gpu // 3}
                for i in range(3)
            ]
            if p[-1] == "attn::out":
                kernels.append({"name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)", "calls": 1, "gpu_time_ns": gpu // 10})
            regions.append({
                "path": "::".join(p), "path_names": p, "name": p[-1],
                "parent": "::".join(p[:-1]) or None, "depth": len(p) - 1, "domain": "LLM",
                "style": "PushPop", "process_id": pid, "thread_id": pid, "instances": 10,
                "inclusive_ns": ns, "exclusive_ns": ns // 10, "min_ns": ns // 12, "median_ns": ns // 10,
                "max_ns": ns // 8, "kernel_count": sum(k["calls"] for k in kernels),
                "gpu_time_ns": sum(k["gpu_time_ns"] for k in kernels), "kernel_count_exclusive": 0,
                "gpu_time_exclusive_ns": 0, "gpu_span_ns": gpu, "kernels": kernels,
            })
            truth.setdefault("::".join(p), {})[str(rank)] = ns
        report = {
            "schema": "llmperf.nsys-regions/v1", "regions": regions,
            "unattributed": {"kernel_count": 0, "gpu_time_ns": 0}, "notes": [],
            "processes": [{"process_id": pid, "devices": [{"device": rank % 8, "kernel_count": 1000, "gpu_time_ns": 10**9, "comm_gpu_time_ns": 10**7}]}],
        }
        with open(os.path.join(d, "nsys", "regions.json"), "w") as f:
            json.dump(report, f)
        with open(os.path.join(d, "rank.json"), "w") as f:
            json.dump({"rank": rank, "rank_from": "SLURM_PROCID", "world_size": a.ranks, "job": "bench",
                       "job_from": "--run-id", "host": f"node{rank // 8:04d}"}, f)
    with open(os.path.join(a.out, "ground_truth.json"), "w") as f:
        json.dump({"ranks": a.ranks, "regions": len(paths), "per_rank": truth}, f)


if __name__ == "__main__":
    main()
