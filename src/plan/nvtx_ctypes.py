"""_llmperf_nvtx: NVTX ranges in a named domain from Python, through ctypes.

llmperf writes this file beside the Python it runs (the --annotate bootstrap,
the --model hf workload). It calls the NVTX C API of PyTorch's wheel
dependencies (libnvToolsExt or libnvtx3interop) directly, with each name as an
ASCII message: no `nvtx` Python package is needed, so none of its versions can
break the capture (under nsys 2022.4 the package's 0.2.17 recorded no range at
all, 0.2.10 did), and ncu 2022.3 matches ranges by these messages where it
sees registered strings as empty names.

Under `--tracer torch` the same calls make torch.profiler record_function
ranges instead (`Records`): they land in the trace as user_annotation.
"""
import ctypes
import glob
import os
import sys

_NAMES = ["libnvToolsExt.so.1", "libnvtx3interop.so.1"]


def _library():
    for name in _NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    roots = [os.path.join(p, "nvidia") for p in sys.path if p]
    roots += [os.path.join(p, "torch", "lib") for p in sys.path if p]
    for root in roots:
        for name in _NAMES:
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


class Domain:
    """push(name) / pop() of ranges in one NVTX domain ("" = the default domain)."""

    def __init__(self, lib, handle):
        self._lib = lib
        self._handle = handle
        self._push = lib.nvtxRangePushEx if handle is None else lib.nvtxDomainRangePushEx

    @staticmethod
    def create(name):
        """The domain `name`, or None when no NVTX C library can be loaded."""
        lib = _library()
        if lib is None:
            return None
        lib.nvtxRangePushEx.argtypes = [ctypes.POINTER(_Attributes)]
        lib.nvtxDomainCreateA.restype = ctypes.c_void_p
        lib.nvtxDomainCreateA.argtypes = [ctypes.c_char_p]
        lib.nvtxDomainRangePushEx.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Attributes)]
        lib.nvtxDomainRangePop.argtypes = [ctypes.c_void_p]
        return Domain(lib, lib.nvtxDomainCreateA(name.encode()) if name else None)

    def prepare(self, name):
        """The attributes of a range named `name`, built once for push_prepared."""
        attrs = _Attributes(3, ctypes.sizeof(_Attributes), 0, 0, 0, 0, 0, 0, 1, name.encode())
        return (attrs, ctypes.byref(attrs))

    def push_prepared(self, prepared):
        if self._handle is None:
            self._push(prepared[1])
        else:
            self._push(self._handle, prepared[1])

    def push(self, name):
        self.push_prepared(self.prepare(name))

    def pop(self):
        if self._handle is None:
            self._lib.nvtxRangePop()
        else:
            self._lib.nvtxDomainRangePop(self._handle)


class Records:
    """A Domain's push/pop as torch.profiler record_function ranges, per thread."""

    def __init__(self, torch):
        import threading

        self.record_function = torch.autograd.profiler.record_function
        self.local = threading.local()

    def prepare(self, name):
        return name

    def push(self, name):
        try:
            stack = self.local.stack
        except AttributeError:
            stack = self.local.stack = []
        entry = self.record_function(name)
        entry.__enter__()
        stack.append(entry)

    push_prepared = push

    def pop(self):
        self.local.stack.pop().__exit__(None, None, None)
