#!/usr/bin/env python3
"""Detection power and false alarms of `llmperf check`, measured on real captures.

For every nsys SQLite export of the shared corpus that has kernels, this makes
copies edited with SQL and checks each against the unedited import:

  mutations  (a regression is there: check must exit 8)
    family   the kernel name with the most GPU time, every launch x F
    region   every kernel launched inside the top-level NVTX region with the
             most GPU time (its launch call inside an instance), x F
    all      every kernel x F
  for F in 1.05, 1.1, 1.25, 1.5, 2.

  nulls      (nothing changed: check must exit 0)
    same     the import checked against itself
    reimport the export imported a second time
    jitter   every kernel's duration times 1 + U(-J, +J), seeded: a repeat of
             the workload on the same GPU (J = 0.02 by default); SEEDS copies

  --workload-pairs N adds N pairs of identical runs of the built-in regions
  demo made here (`llmperf workload --model nvtx_regions infer.iters=30
  runner.run.repeat=3`, CPU wall times on this machine), checked at each budget
  with and without --discount-shift: nulls too, on a machine that shifts.

Each pair is checked at each budget (relative_pct; absolute_ms 0.01, 10 samples),
with and without --strict. Prints one Markdown table per export, then the
totals docs/ci.md quotes. Only the Python standard library; needs
target/release/llmperf and the corpus.

  python3 bench/check_mutations.py [--seeds 20] [--jitter 0.02] [--budgets 5,10,25] [CORPUS]
"""
import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/llmperf"
FACTORS = [1.05, 1.1, 1.25, 1.5, 2.0]


def exports(corpus):
    """Every .sqlite of the corpus with at least one kernel."""
    for db in sorted(corpus.rglob("*.sqlite")):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
                continue
            n, gpu = c.execute("SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
            if n:
                yield db, n, gpu, "NVTX_EVENTS" in tables and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables


def top_family(c):
    """(name id, share of GPU time) of the kernel name with the most GPU time."""
    total = c.execute("SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    name, ns = c.execute(
        "SELECT demangledName, SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 ORDER BY 2 DESC LIMIT 1"
    ).fetchone()
    return name, ns / total


def region_kernels(c):
    """(rowids of the kernels launched inside the top-level push/pop range name with the
    most such GPU time, its name, its share of GPU time), or None."""
    total = c.execute("SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    text = "COALESCE(n.text, (SELECT value FROM StringIds WHERE id = n.textId))"
    # Top level: no other push/pop range of the thread encloses it.
    rows = c.execute(
        f"""SELECT {text}, k.rowid, k.end - k.start FROM NVTX_EVENTS n
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start >= n.start AND r.start < n.end
            JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId AND k.globalPid >> 24 = r.globalTid >> 24
            WHERE n.eventType = 59 AND n.end IS NOT NULL AND NOT EXISTS (SELECT 1 FROM NVTX_EVENTS o
              WHERE o.eventType = 59 AND o.globalTid = n.globalTid AND o.rowid <> n.rowid
                AND o.start <= n.start AND o.end >= n.end AND (o.start < n.start OR o.end > n.end OR o.rowid < n.rowid))"""
    ).fetchall()
    by = {}
    for name, rowid, ns in rows:
        # PyTorch's per-call attributes (", seq = 1, op_id = 2") are one operator.
        key = (name or "").split(",")[0]
        ids, t = by.get(key, (set(), 0))
        if rowid not in ids:
            ids.add(rowid)
            t += ns
        by[key] = (ids, t)
    if not by:
        return None
    name, (ids, ns) = max(by.items(), key=lambda kv: kv[1][1])
    return sorted(ids), name, ns / total


def edited(src, dst, sql, params=()):
    shutil.copy(src, dst)
    with sqlite3.connect(dst) as c:
        if callable(sql):
            sql(c)
        else:
            c.execute(sql, params)
    return dst


def scale(factor, where="1"):
    return (f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST(? * (end - start) AS INTEGER) WHERE {where}", (factor,))


def jitter(seed, j):
    def run(c):
        rng = random.Random(seed)
        rows = c.execute("SELECT rowid, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid").fetchall()
        c.executemany(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + ? WHERE rowid = ?",
            [(max(1, round(ns * (1 + rng.uniform(-j, j)))), rowid) for rowid, ns in rows],
        )
    return run


def imported(db, out):
    subprocess.run(
        [BIN, "-q", "import", "nsys", db, "-o", out, "pipeline.nsys.executable=/nonexistent"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return out


def check(run, base, budgets, strict, *extra):
    argv = [BIN, "-q", "check", run, "--baseline", base, "--budgets", budgets, *extra]
    if strict:
        argv.append("--strict")
    return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", default=os.environ.get("LLMPERF_CORPUS", str(ROOT.parent / "shared/fixtures")))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jitter", type=float, default=0.02)
    ap.add_argument("--budgets", default="5,10,25")
    ap.add_argument("--workload-pairs", type=int, default=0)
    args = ap.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="llmperf-mutations-"))
    try:
        files = {}
        for pct in budgets:
            files[pct] = tmp / f"budgets-{pct:g}.yaml"
            files[pct].write_text(f"defaults:\n  relative_pct: {pct:g}\n  absolute_ms: 0.01\n  min_samples: 10\n")
        # (kind, factor) -> budget -> strict -> [detected, total]
        totals = {}
        for db, kernels, gpu, has_nvtx in exports(Path(args.corpus)):
            name = db.relative_to(args.corpus)
            work = tmp / str(name).replace("/", "_")
            work.mkdir()
            src = work / "src.sqlite"
            shutil.copy(db, src)
            base = imported(src, work / "base")
            with sqlite3.connect(src) as c:
                family, family_share = top_family(c)
                region = region_kernels(c) if has_nvtx else None
            cases = [("null", "same", None, base), ("null", "reimport", None, imported(src, work / "again"))]
            for seed in range(args.seeds):
                db2 = edited(src, work / f"jitter{seed}.sqlite", jitter(seed, args.jitter))
                cases.append(("null", f"jitter {args.jitter:g}", None, imported(db2, work / f"jitter{seed}")))
            for f in FACTORS:
                sql, p = scale(f, "demangledName = %d" % family)
                cases.append(("family", f"family ({family_share:.0%} of GPU time)", f, imported(edited(src, work / f"family{f}.sqlite", sql, p), work / f"family{f}")))
                if region:
                    ids, rname, share = region
                    sql, p = scale(f, "rowid IN (%s)" % ",".join(map(str, ids)))
                    cases.append(("region", f"region `{rname[:40]}` ({share:.0%})", f, imported(edited(src, work / f"region{f}.sqlite", sql, p), work / f"region{f}")))
                sql, p = scale(f)
                cases.append(("all", "every kernel", f, imported(edited(src, work / f"all{f}.sqlite", sql, p), work / f"all{f}")))
            print(f"\n### {name}: {kernels} kernels, {gpu / 1e6:.1f} ms of GPU time\n")
            head = " | ".join(f"{b:g}%{' strict' if s else ''}" for b in budgets for s in (False, True))
            print(f"| case | factor | {head} |")
            print("|---|---:|" + "---:|" * (2 * len(budgets)))
            for kind, what, factor, run in cases:
                cells = []
                for b in budgets:
                    for strict in (False, True):
                        rc = check(run, base, files[b], strict)
                        hit = rc == 8 if kind != "null" else rc != 0
                        key = (kind, factor)
                        t = totals.setdefault(key, {}).setdefault((b, strict), [0, 0])
                        t[0] += hit
                        t[1] += 1
                        cells.append(str(rc))
                print(f"| {kind}: {what} | {'×%g' % factor if factor else '—'} | " + " | ".join(cells) + " |")
        if args.workload_pairs:
            workload_nulls(args.workload_pairs, budgets, files, tmp, totals)
        print("\n### Totals (exit codes above; here: detected / cases, or false alarms / null pairs)\n")
        head = " | ".join(f"{b:g}%{' strict' if s else ''}" for b in budgets for s in (False, True))
        print(f"| case | factor | {head} |")
        print("|---|---:|" + "---:|" * (2 * len(budgets)))
        kinds = ["null", "workload null", "workload null, --discount-shift", "family", "region", "all"]
        order = sorted(totals, key=lambda k: (kinds.index(k[0]), k[1] or 0))
        for kind, factor in order:
            cells = [f"{totals[(kind, factor)][(b, s)][0]}/{totals[(kind, factor)][(b, s)][1]}" for b in budgets for s in (False, True)]
            print(f"| {kind} | {'×%g' % factor if factor else '—'} | " + " | ".join(cells) + " |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def workload_nulls(pairs, budgets, files, tmp, totals):
    """Pairs of identical CPU runs of the regions demo, each checked like the
    nulls above, and again with --discount-shift."""
    overrides = ["infer.iters=30", "runner.run.repeat=3"]
    runs = tmp / "workload"
    print(f"\n### {pairs} pairs of `llmperf workload --model nvtx_regions {' '.join(overrides)}` made here\n")
    for i in range(pairs):
        a, b = (
            subprocess.run([BIN, "-q", "workload", "--model", "nvtx_regions", *overrides, "-o", runs],
                           check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            for _ in range(2)
        )
        for kind, extra in [("workload null", ()), ("workload null, --discount-shift", ("--discount-shift",))]:
            cells = []
            for bud in budgets:
                for strict in (False, True):
                    rc = check(b, a, files[bud], strict, *extra)
                    t = totals.setdefault((kind, None), {}).setdefault((bud, strict), [0, 0])
                    t[0] += rc != 0
                    t[1] += 1
                    cells.append(str(rc))
            print(f"| pair {i + 1}: {kind} | — | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
