"""llmperf --annotate modules|ops: NVTX ranges around every nn.Module forward.

llmperf writes this file into the run directory (annotate/sitecustomize.py)
and puts that folder first on PYTHONPATH, so every Python process of the
profiled command imports it at start-up, with the user's program unchanged.
Nothing happens until the program imports torch; then global forward hooks
push one NVTX range per module call, named by the module's qualified path
(`layers.3.self_attn.q_proj`; the outermost module by its class name), in the
NVTX domain LLMPERF_ANNOTATE_DOMAIN, down to LLMPERF_ANNOTATE_DEPTH levels of
modules, and only for paths that match LLMPERF_ANNOTATE_INCLUDE (a regular
expression, searched) when it is set.

Phases: the outermost call of a module whose forward takes a KV cache (the
`cache` or `past_key_values` argument of a Hugging Face causal LM) is wrapped
in a `prefill` range when that cache is empty or absent-but-passed (None),
and in a `decode_step` range when it holds tokens, so generate()-style loops
split into prefill and decode steps with no help from the program.

LLMPERF_ANNOTATE=ops adds operator ranges: PyTorch's own
torch.autograd.profiler.emit_nvtx, entered once torch is imported, in the
default domain (`aten::linear, seq = 12`; llmperf strips the attributes).

A sitecustomize that this file shadows is run after it.
"""
import importlib.util
import os
import re
import sys
import threading
import weakref


def _say(message):
    sys.stderr.write("llmperf --annotate: " + message + "\n")


def _install(torch):
    from _llmperf_nvtx import Domain

    domain = Domain.create(os.environ.get("LLMPERF_ANNOTATE_DOMAIN", "llmperf.modules"))
    if domain is None:
        _say("no NVTX C library (libnvToolsExt, libnvtx3interop) next to torch: no module ranges are recorded")
        return
    depth_limit = int(os.environ.get("LLMPERF_ANNOTATE_DEPTH", "4"))
    pattern = os.environ.get("LLMPERF_ANNOTATE_INCLUDE") or None
    include = re.compile(pattern) if pattern else None
    names = weakref.WeakKeyDictionary()  # module -> qualified path, from the first outermost call
    state = threading.local()

    def name_of(module):
        name = names.get(module)
        if name is None:
            root = type(module).__name__
            for path, sub in module.named_modules():
                names.setdefault(sub, path or root)
            name = names[module]
        return name

    phases = {}  # module class -> whether its forward takes a KV cache, and under which name

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

    def phase_of(module):
        """prefill / decode_step for the outermost call of a model with a KV cache, else None."""
        keyword = cache_keyword(module)
        if keyword is None:
            return None
        kwargs = _call_kwargs(module)
        if kwargs is None or keyword not in kwargs:
            return None
        length = _cache_length(kwargs[keyword])
        if length is None:
            return None
        return "prefill" if length == 0 else "decode_step"

    def pre(module, args):
        stack = getattr(state, "stack", None)
        if stack is None:
            stack = state.stack = []
        pushed = 0
        if not stack:
            phase = phase_of(module)
            if phase is not None:
                domain.push(phase)
                pushed += 1
        if len(stack) < depth_limit:
            name = name_of(module)
            if include is None or include.search(name):
                domain.push(name)
                pushed += 1
        stack.append(pushed)

    def post(module, args, output):
        stack = getattr(state, "stack", None)
        if stack:
            for _ in range(stack.pop()):
                domain.pop()

    hooks = torch.nn.modules.module
    hooks.register_module_forward_pre_hook(pre)
    try:
        hooks.register_module_forward_hook(post, always_call=True)
    except TypeError:  # torch before 2.0: no always_call (a forward that raises leaves its range open)
        hooks.register_module_forward_hook(post)
    if os.environ.get("LLMPERF_ANNOTATE") == "ops":
        _operator_ranges(torch)


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


def _call_kwargs(module):
    """The keyword arguments of the module call whose pre-hook is running.

    Global forward pre-hooks get the positional arguments only; Hugging Face
    models are called with keywords. They are read from torch's own frame
    (Module._call_impl, whose `self` is the module): None where that frame is
    not found, and then no phase range is pushed.
    """
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return None
        if frame.f_code.co_name == "_call_impl" and frame.f_locals.get("self") is module:
            kwargs = frame.f_locals.get("kwargs")
            return kwargs if isinstance(kwargs, dict) else None
        frame = frame.f_back
    return None


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
                _say("module ranges are off: %s: %s" % (type(e).__name__, e))

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


if os.environ.get("LLMPERF_ANNOTATE") in ("modules", "ops"):
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorch())
_run_shadowed_sitecustomize()
