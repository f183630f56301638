#!/usr/bin/env python3
"""The shared generator's nsys SQLite export in bounded memory, for 10 million ranges and kernels.

../shared/bench/gen_nsys_sqlite.py simulates every thread, keeps every row in lists, sorts
them and then writes them: about 8 GB and three minutes at 10M ranges + 10M kernels. This
script writes the same rows (same arguments, same seed: the same tables, row for row, and
the same ground truth) with memory that does not grow with the size:

- it imports the shared generator and runs its own simulation (the same ThreadSim, Plan,
  templates and jitter), so the two cannot drift apart;
- each simulated thread streams its rows to temporary files (fixed-size binary records)
  instead of lists; a thread's ranges, launch calls and kernels each come out in time
  order, NVTX rows once their outermost range has ended;
- the writer merges the threads' files by (start, thread), as the shared generator's
  sort does, into the three tables; correlation ids are the launch calls' positions in
  the merged runtime table (the shared rule), handed to each kernel through a per-thread
  queue of launches whose kernel has not been written yet (what is queued on the GPU).

    gen_nsys_stream.py --ranges 10000000 --kernels 10000000 --out $TMPDIR/big.sqlite --expect $TMPDIR/big.json

Same options as the shared generator; SHARED_BENCH (default ../shared/bench next to the
repository) says where it is. `bench/gen_nsys_stream_check.sh` compares the two at a size
the shared one can hold.
"""
import heapq
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED_BENCH", os.path.join(HERE, "..", "..", "shared", "bench"))
sys.path.insert(0, SHARED)
import gen_nsys_sqlite as gen  # noqa: E402  (the shared generator: simulation and schema)

# start, end, globalTid, textId (-1: none), text index (-1: none), color
NVTX = struct.Struct("<qqqqqq")
# start, end, eventClass, globalTid, nameId, launch (1) or sync (0)
RUNTIME = struct.Struct("<qqqqqq")
# start, template index, stream
KERNEL = struct.Struct("<qqq")


class Sink:
    """One thread's rows of one table, appended to a temporary file."""

    def __init__(self, tmp, layout):
        self.file = tempfile.TemporaryFile(dir=tmp)
        self.out = open(self.file.fileno(), "wb", buffering=1 << 20, closefd=False)
        self.layout = layout
        self.count = 0

    def write(self, *fields):
        self.out.write(self.layout.pack(*fields))
        self.count += 1

    def rows(self):
        self.out.flush()
        size = self.layout.size
        with open(self.file.fileno(), "rb", buffering=1 << 20, closefd=False) as f:
            f.seek(0)
            while True:
                chunk = f.read(size * 4096)
                if not chunk:
                    return
                yield from self.layout.iter_unpack(chunk)


class ThreadRows:
    """Stands in for the lists `ThreadSim` appends to, for one thread."""

    def __init__(self, tmp, template_index):
        self.nvtx = Sink(tmp, NVTX)
        self.runtime = Sink(tmp, RUNTIME)
        self.kernels = Sink(tmp, KERNEL)
        self.pending = []  # NVTX rows of the open outermost range (their end comes at its pop)
        self.template_index = template_index


class NvtxList:
    def __init__(self, rows):
        self.rows = rows

    def append(self, row):
        self.rows.pending.append(row)


class RuntimeList:
    def __init__(self, rows):
        self.rows = rows

    def append(self, r):
        r_start, _ti, r_end, event_class, gtid, api, kidx = r
        self.rows.runtime.write(r_start, r_end, event_class, gtid, api, 1 if kidx >= 0 else 0)


class KernelList:
    def __init__(self, rows):
        self.rows = rows
        self.n = 0

    def __len__(self):
        return self.n  # ThreadSim links a launch to its kernel by this index; only >= 0 matters

    def append(self, k):
        k_start, _ti, t, stream = k
        self.rows.kernels.write(k_start, self.rows.template_index[id(t)], stream)
        self.n += 1


class View:
    """The simulation context with this thread's row sinks; everything else is shared."""

    _own = ("nvtx", "runtime", "kernels")

    def __init__(self, ctx, rows):
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "nvtx", NvtxList(rows))
        object.__setattr__(self, "runtime", RuntimeList(rows))
        object.__setattr__(self, "kernels", KernelList(rows))

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def __setattr__(self, name, value):
        setattr(self._ctx, name, value)


def make_thread_sim(tmp, all_rows, texts, template_index):
    class StreamingSim(gen.ThreadSim):
        def __init__(self, ti, gtid, stream, t0, seed, ctx):
            rows = ThreadRows(tmp, template_index)
            all_rows.append(rows)
            super().__init__(ti, gtid, stream, t0, seed, View(ctx, rows))
            self.rows = rows

        def pop(self):
            super().pop()
            if not self.stack:  # the outermost range ended: its rows are complete
                rows = self.rows
                for start, end, gtid, (text, text_id), color, _ti in rows.pending:
                    t = -1 if text is None else texts.setdefault(text, len(texts))
                    rows.nvtx.write(start, end, gtid, -1 if text_id is None else text_id, t, color)
                rows.pending.clear()

    return StreamingSim


def keyed(ti, rows):
    for row in rows:
        yield row[0], ti, row


def merged(streams):
    """Rows of every thread by (start, thread), as the shared generator sorts them."""
    for _start, ti, row in heapq.merge(*[keyed(ti, s) for ti, s in enumerate(streams)]):
        yield ti, row


def write_events(out, ctx, cols, gpid):
    """The shared write_events, fed from the threads' files instead of lists."""
    texts = [None] * len(ctx.texts)
    for text, i in ctx.texts.items():
        texts[i] = text
    dom = 1 if ctx.domain else 0
    insert_nvtx = ("INSERT INTO NVTX_EVENTS(start, end, eventType, color, text, globalTid, textId, domainId) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    if ctx.domain:
        first = min((r.nvtx_first for r in ctx.rows if r.nvtx.count), default=ctx.t0)
        out.execute(insert_nvtx, (first - 1000, None, gen.NVTX_DOMAIN_CREATE, None, ctx.domain, ctx.main_tid, None, 1))

    def nvtx_rows():
        for _ti, (start, end, gtid, text_id, text, color) in merged([r.nvtx.rows() for r in ctx.rows]):
            yield (start, end, gen.NVTX_PUSHPOP, color, None if text < 0 else texts[text], gtid,
                   None if text_id < 0 else text_id, dom)

    out.executemany(insert_nvtx, nvtx_rows())

    # Launch calls and kernels in one pass: a kernel starts after its launch call, so
    # once the calls up to a kernel's start are written, its correlation id is known.
    ix = {c: i for i, c in enumerate(cols)}
    i_start, i_end, i_stream, i_corr = ix["start"], ix["end"], ix["streamId"], ix["correlationId"]
    i_gpid, i_grid = ix["globalPid"], ix.get("gridId")
    queued = [[] for _ in ctx.rows]  # per thread: correlation ids of launches whose kernel is not written
    heads = [0] * len(ctx.rows)
    calls = merged([r.runtime.rows() for r in ctx.rows])
    next_call = next(calls, None)
    corr = 0
    runtime_batch, kernel_batch = [], []
    insert_runtime = ("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, "
                      "correlationId, nameId, returnValue) VALUES (?, ?, ?, ?, ?, ?, ?)")
    insert_kernel = (f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL({', '.join(cols)}) "
                     f"VALUES ({', '.join('?' * len(cols))})")

    def calls_until(t):
        nonlocal next_call, corr
        while next_call is not None and next_call[1][0] <= t:
            ti, (start, end, event_class, gtid, api, launch) = next_call
            corr += 1
            runtime_batch.append((start, end, event_class, gtid, corr, api, 0))
            if launch:
                queued[ti].append(corr)
            next_call = next(calls, None)
        if len(runtime_batch) >= 65536:
            out.executemany(insert_runtime, runtime_batch)
            runtime_batch.clear()

    for n, (ti, (start, template, stream)) in enumerate(merged([r.kernels.rows() for r in ctx.rows]), start=1):
        calls_until(start)
        t = ctx.templates[template]
        row = list(t["base"])
        row[i_start] = start
        row[i_end] = start + t["duration"]
        row[i_stream] = stream
        q = queued[ti]
        row[i_corr] = q[heads[ti]]
        heads[ti] += 1
        if heads[ti] > 4096:  # drop what was used
            del q[:heads[ti]]
            heads[ti] = 0
        row[i_gpid] = gpid
        if i_grid is not None:
            row[i_grid] = n
        kernel_batch.append(row)
        if len(kernel_batch) >= 65536:
            out.executemany(insert_kernel, kernel_batch)
            kernel_batch.clear()
    calls_until(float("inf"))
    out.executemany(insert_runtime, runtime_batch)
    out.executemany(insert_kernel, kernel_batch)


def main(argv=None):
    tmp = tempfile.mkdtemp(prefix="gen_nsys_stream.")
    all_rows, texts, template_index = [], {}, {}
    real_load = gen.load_templates

    def load_templates(tdb, strings):
        cols, templates = real_load(tdb, strings)
        template_index.update((id(t), i) for i, t in enumerate(templates))
        return cols, templates

    real_simulate = gen.simulate

    def simulate(args, templates, threads, streams, t0, strings):
        ctx, summary = real_simulate(args, templates, threads, streams, t0, strings)
        ctx.rows, ctx.texts = all_rows, texts
        for r in all_rows:
            r.nvtx.out.flush()
            first = next(r.nvtx.rows(), None)
            r.nvtx_first = first[0] if first else None
        return ctx, summary

    gen.load_templates = load_templates
    gen.simulate = simulate
    gen.ThreadSim = make_thread_sim(tmp, all_rows, texts, template_index)
    gen.write_events = write_events
    try:
        return gen.main(argv)
    finally:
        for r in all_rows:
            for s in (r.nvtx, r.runtime, r.kernels):
                s.file.close()
        os.rmdir(tmp)


if __name__ == "__main__":
    sys.exit(main())
