"""llmperf --annotate modules|ops: NVTX ranges around every nn.Module forward.

llmperf writes this file into the run directory (annotate/sitecustomize.py)
and puts that folder first on PYTHONPATH, so every Python process of the
profiled command imports it at start-up, with the user's program unchanged.
Nothing happens until the program imports torch; then nn.Module.__call__
pushes one NVTX range per module call, named by the module's qualified path
(`layers.3.self_attn.q_proj`; the outermost module by its class name), in the
NVTX domain LLMPERF_BOOTSTRAP_DOMAIN, down to LLMPERF_BOOTSTRAP_DEPTH levels of
modules, and only for paths that match LLMPERF_BOOTSTRAP_INCLUDE (a regular
expression, searched) when it is set.

Phases: the outermost call of a module whose forward takes a KV cache (the
`cache` or `past_key_values` argument of a Hugging Face causal LM) is wrapped
in a `prefill` range when that cache is empty or absent-but-passed (None),
and in a `decode_step` range when it holds tokens, so generate()-style loops
split into prefill and decode steps with no help from the program.

LLMPERF_BOOTSTRAP=ops adds operator ranges: PyTorch's own
torch.autograd.profiler.emit_nvtx, entered at the first module call (so the
operators that build and initialise the model are not top-level regions of
their own), in the default domain (`aten::linear, seq = 12`; llmperf strips
the attributes).

LLMPERF_BOOTSTRAP_TRACER=torch (`llmperf profile --tracer torch`): when the
program imports torch, torch.profiler starts recording (CPU, and CUDA where
torch sees a GPU), and at exit the trace is written to
LLMPERF_BOOTSTRAP_TRACE_DIR/trace.<pid>.pt.trace.json, one per process. The
module ranges above are then record_function ranges (user_annotation in the
trace) instead of NVTX; `ops` adds nothing, the trace has every operator.
With LLMPERF_BOOTSTRAP_TORCH_ACTIVE > 0, torch.profiler's schedule runs in
steps, a step being one outermost nn.Module call (WAIT, WARMUP, ACTIVE).

A sitecustomize that this file shadows is run after it.
"""
import atexit
import importlib.util
import os
import re
import sys
import threading
import weakref


def _say(message):
    sys.stderr.write("llmperf bootstrap: " + message + "\n")


def _install(torch):
    tracer = None
    if os.environ.get("LLMPERF_BOOTSTRAP_TRACER") == "torch":
        tracer = _Tracer(torch)
    if os.environ.get("LLMPERF_BOOTSTRAP") not in ("modules", "ops"):
        if tracer is not None and tracer.steps:
            _install_steps(torch, tracer)
        return
    if tracer is not None:
        from _llmperf_nvtx import Records

        domain = Records(torch)
    else:
        from _llmperf_nvtx import Domain

        domain = Domain.create(os.environ.get("LLMPERF_BOOTSTRAP_DOMAIN", "llmperf.modules"))
    if domain is None:
        _say("no NVTX C library (libnvToolsExt, libnvtx3interop) next to torch: no module ranges are recorded")
        return
    depth_limit = int(os.environ.get("LLMPERF_BOOTSTRAP_DEPTH", "4"))
    # An application that marks its own prefill and decode steps (--model hf) gets no phase ranges here.
    with_phases = os.environ.get("LLMPERF_BOOTSTRAP_PHASES", "1") != "0"
    # `ops`: the operator ranges start at the first module call (a list, so
    # that `call` can empty it: once, whichever thread calls first). Under
    # torch.profiler the trace holds every operator already.
    ops_pending = [True] if os.environ.get("LLMPERF_BOOTSTRAP") == "ops" and tracer is None else []
    step = tracer.step if tracer is not None and tracer.steps else None
    pattern = os.environ.get("LLMPERF_BOOTSTRAP_INCLUDE") or None
    include = re.compile(pattern) if pattern else None
    # id(module) -> its range, prepared once (False: the filter leaves it out),
    # from the first outermost call of its tree; dropped when the module dies.
    ranges = {}
    # range name -> the module classes seen under it: llmperf groups `layers.0`,
    # `layers.1`, ... as one repeated module only when they are one class
    # (an nn.Sequential of Linear, GELU, Linear is not a repeat). Written
    # beside this file at exit (classes.<pid>.json).
    classes = {}
    atexit.register(_write_classes, classes)
    state = threading.local()
    phases = {}  # module class -> the name of its forward's KV-cache argument, or None

    def range_of(module):
        key = id(module)
        entry = ranges.get(key)
        if entry is None:
            root = type(module).__name__
            for path, sub in module.named_modules():
                if id(sub) not in ranges:
                    name = path or root
                    keep = include is None or include.search(name)
                    ranges[id(sub)] = domain.prepare(name) if keep else False
                    if keep:
                        classes.setdefault(name, set()).add(type(sub).__qualname__)
                    weakref.finalize(sub, ranges.pop, id(sub), None)
            entry = ranges[key]
        return entry

    def cache_keyword(module):
        cls = type(module)
        if cls not in phases:
            try:
                import inspect

                params = inspect.signature(module.forward).parameters
                phases[cls] = next((k for k in ("cache", "past_key_values") if k in params), None)
            except (TypeError, ValueError):
                phases[cls] = None
        return phases[cls]

    def phase_of(module, kwargs):
        """prefill / decode_step for the outermost call of a model with a KV cache, else None."""
        keyword = cache_keyword(module)
        if keyword is None or keyword not in kwargs:
            return None
        length = _cache_length(kwargs[keyword])
        if length is None:
            return None
        return "prefill" if length == 0 else "decode_step"

    original = torch.nn.Module.__call__

    def call(module, *args, **kwargs):
        try:
            stack = state.stack
        except AttributeError:
            stack = state.stack = []
        depth = len(stack)
        if depth >= depth_limit:
            # Below the depth limit: no range, and its submodules are deeper still.
            return original(module, *args, **kwargs)
        pushed = 0
        if depth == 0 and ops_pending:
            # Operators from the first forward on: model construction is done.
            del ops_pending[:]
            _operator_ranges(torch)
        if depth == 0 and with_phases:
            phase = phase_of(module, kwargs)
            if phase is not None:
                domain.push(phase)
                pushed += 1
        entry = range_of(module)
        if entry:
            domain.push_prepared(entry)
            pushed += 1
        stack.append(pushed)
        try:
            return original(module, *args, **kwargs)
        finally:
            stack.pop()
            for _ in range(pushed):
                domain.pop()
            if depth == 0 and step is not None:
                step()

    # Module.__call__ rather than global forward hooks: a module below the
    # depth limit then costs one Python call, and torch keeps its fast path
    # (global hooks send every module call through the slow one).
    torch.nn.Module.__call__ = call


def _install_steps(torch, tracer):
    """The profiler's schedule steps at the end of each outermost module call."""
    state = threading.local()
    original = torch.nn.Module.__call__

    def call(module, *args, **kwargs):
        depth = getattr(state, "depth", 0)
        state.depth = depth + 1
        try:
            return original(module, *args, **kwargs)
        finally:
            state.depth = depth
            if depth == 0:
                tracer.step()

    torch.nn.Module.__call__ = call


def _cuda_seen(torch):
    """torch.cuda.is_available() through NVML, which leaves CUDA uninitialised
    (a program that forks workers after importing torch must still be able to)."""
    before = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        return torch.cuda.is_available()
    finally:
        if before is None:
            del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = before


class _Tracer:
    """torch.profiler from the import of torch to the exit of the process."""

    def __init__(self, torch):
        from torch.profiler import ProfilerActivity, profile, schedule

        folder = os.environ["LLMPERF_BOOTSTRAP_TRACE_DIR"]
        self.path = os.path.join(folder, "trace.%d.pt.trace.json" % os.getpid())
        self.written = False
        env = os.environ.get
        activities = [ProfilerActivity.CPU]
        if _cuda_seen(torch):
            activities.append(ProfilerActivity.CUDA)
        wait, warmup, active = (int(env("LLMPERF_BOOTSTRAP_TORCH_" + k, "0")) for k in ("WAIT", "WARMUP", "ACTIVE"))
        self.steps = active > 0
        options = dict(
            activities=activities,
            record_shapes=env("LLMPERF_BOOTSTRAP_TORCH_SHAPES") == "1",
            with_stack=env("LLMPERF_BOOTSTRAP_TORCH_STACK") == "1",
        )
        if self.steps:
            options["schedule"] = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
            options["on_trace_ready"] = self._write
        self.profiler = profile(**options)
        self.profiler.start()
        atexit.register(self.stop)

    def step(self):
        try:
            self.profiler.step()
        except Exception as e:  # never break the user's program
            _say("torch.profiler step failed: %s: %s" % (type(e).__name__, e))

    def stop(self):
        try:
            self.profiler.stop()
            if not self.steps:
                self._write(self.profiler)
        except Exception as e:
            _say("no trace written: %s: %s" % (type(e).__name__, e))

    def _write(self, profiler):
        if self.written:
            return
        self.written = True
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        profiler.export_chrome_trace(self.path + ".tmp")
        os.replace(self.path + ".tmp", self.path)


def _operator_ranges(torch):
    """torch.autograd.profiler.emit_nvtx for the rest of the process.

    emit_nvtx first synchronizes CUDA, which raises on a host without a GPU;
    there the same profiler state is entered without that synchronization.
    """
    profiler = torch.autograd.profiler
    if torch.cuda.is_available():
        profiler.emit_nvtx(record_shapes=False).__enter__()
        return
    profiler._run_on_profiler_start()
    state = profiler.ProfilerConfig(
        profiler.ProfilerState.NVTX, False, False, False, False, False, profiler._ExperimentalConfig()
    )
    profiler._enable_profiler(state, set())


def _write_classes(classes):
    """classes.<pid>.json beside this file: {range name: [class, ...]}."""
    if not classes:
        return
    try:
        import json

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "classes.%d.json" % os.getpid())
        with open(path + ".tmp", "w") as f:
            json.dump({name: sorted(kinds) for name, kinds in classes.items()}, f)
        os.replace(path + ".tmp", path)
    except Exception as e:  # never break the user's program
        _say("module classes not written: %s: %s" % (type(e).__name__, e))


def _cache_length(cache):
    """Tokens a KV cache holds: 0 for None or an empty cache; None when it cannot be told."""
    if cache is None:
        return 0
    get = getattr(cache, "get_seq_length", None)
    if get is not None:
        try:
            return int(get())
        except Exception:
            return None
    if isinstance(cache, (tuple, list)):  # the legacy ((k, v), ...) per layer
        try:
            return int(cache[0][0].shape[-2]) if len(cache) else 0
        except Exception:
            return None
    return None


class _AfterTorch:
    """Runs _install once torch has been imported, and never imports it itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                _install(module)
            except Exception as e:  # never break the user's program
                _say("not installed: %s: %s" % (type(e).__name__, e))

        spec.loader.exec_module = exec_module
        return spec


def _run_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_llmperf_shadowed_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


if os.environ.get("LLMPERF_BOOTSTRAP") in ("modules", "ops") or os.environ.get("LLMPERF_BOOTSTRAP_TRACER") == "torch":
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorch())
_run_shadowed_sitecustomize()
