"""llmperf --annotate modules: NVTX ranges around every nn.Module forward.

llmperf writes this file into the run directory (annotate/sitecustomize.py)
and puts that folder first on PYTHONPATH, so every Python process of the
profiled command imports it at start-up, with the user's program unchanged.
Nothing happens until the program imports torch; then global forward hooks
push one NVTX range per module call, named by the module's qualified path
(`layers.3.self_attn.q_proj`; the outermost module by its class name), in the
NVTX domain LLMPERF_ANNOTATE_DOMAIN, down to LLMPERF_ANNOTATE_DEPTH levels of
modules, and only for paths that match LLMPERF_ANNOTATE_INCLUDE (a regular
expression, searched) when it is set. A sitecustomize that this file shadows
is run after it.
"""
import ctypes
import glob
import importlib.util
import os
import re
import sys
import threading
import weakref


def _nvtx_library():
    """The NVTX C API from PyTorch's wheel dependencies (libnvToolsExt or libnvtx3interop)."""
    names = ["libnvToolsExt.so.1", "libnvtx3interop.so.1"]
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    roots = [os.path.join(p, "nvidia") for p in sys.path if p] + [os.path.join(p, "torch", "lib") for p in sys.path if p]
    for root in roots:
        for name in names:
            for path in glob.glob(os.path.join(root, "**", name), recursive=True):
                try:
                    return ctypes.CDLL(path)
                except OSError:
                    pass
    return None


class _Attributes(ctypes.Structure):
    """nvtxEventAttributes_t (NVTX v3) with an ASCII message."""

    _fields_ = [
        ("version", ctypes.c_uint16),
        ("size", ctypes.c_uint16),
        ("category", ctypes.c_uint32),
        ("colorType", ctypes.c_int32),
        ("color", ctypes.c_uint32),
        ("payloadType", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("payload", ctypes.c_uint64),
        ("messageType", ctypes.c_int32),
        ("message", ctypes.c_char_p),
    ]


def _say(message):
    sys.stderr.write("llmperf --annotate: " + message + "\n")


def _install(torch):
    lib = _nvtx_library()
    if lib is None:
        _say("no NVTX C library (libnvToolsExt, libnvtx3interop) next to torch: no module ranges are recorded")
        return
    lib.nvtxDomainCreateA.restype = ctypes.c_void_p
    lib.nvtxDomainCreateA.argtypes = [ctypes.c_char_p]
    lib.nvtxDomainRangePushEx.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Attributes)]
    lib.nvtxDomainRangePop.argtypes = [ctypes.c_void_p]
    domain = lib.nvtxDomainCreateA(os.environ.get("LLMPERF_ANNOTATE_DOMAIN", "llmperf.modules").encode())
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

    def pre(module, args):
        stack = getattr(state, "stack", None)
        if stack is None:
            stack = state.stack = []
        pushed = False
        if len(stack) < depth_limit:
            name = name_of(module)
            if include is None or include.search(name):
                attrs = _Attributes(3, ctypes.sizeof(_Attributes), 0, 0, 0, 0, 0, 0, 1, name.encode())
                lib.nvtxDomainRangePushEx(domain, ctypes.byref(attrs))
                pushed = True
        stack.append(pushed)

    def post(module, args, output):
        stack = getattr(state, "stack", None)
        if stack and stack.pop():
            lib.nvtxDomainRangePop(domain)

    hooks = torch.nn.modules.module
    hooks.register_module_forward_pre_hook(pre)
    try:
        hooks.register_module_forward_hook(post, always_call=True)
    except TypeError:  # torch before 2.0: no always_call (a forward that raises leaves its range open)
        hooks.register_module_forward_hook(post)


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


if os.environ.get("LLMPERF_ANNOTATE") == "modules":
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorch())
_run_shadowed_sitecustomize()
