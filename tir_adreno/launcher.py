"""Kernel launchers: enqueue a list of bound kernels with as little host time as possible.

pyopencl's ``enqueue_nd_range_kernel`` converts the sizes and creates an Event on
every launch (18-23 us per launch on NVIDIA's driver, more than a small kernel
takes). :class:`CtypesLauncher` calls ``clEnqueueNDRangeKernel`` of the OpenCL
library pyopencl itself loaded, with the sizes packed once and no event;
:class:`PyOpenCLLauncher` is the pure-Python fallback. ``$TIR_ADRENO_LAUNCHER``
(auto, ctypes, pyopencl) picks one; auto takes ctypes when the library loads.

Importable without TVM.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os

import pyopencl as cl

ENV = "TIR_ADRENO_LAUNCHER"
CHOICES = ("auto", "ctypes", "pyopencl")
#: ``flush``: a ``clFlush`` after every that many launches (0: none; see :class:`Launcher`).
FLUSH_ENV = "TIR_ADRENO_LAUNCH_FLUSH"


class LaunchError(RuntimeError):
    """An enqueue failed; ``code`` is the OpenCL error code, the message names the kernel."""

    def __init__(self, kernel: str, code: int, call: str = "clEnqueueNDRangeKernel"):
        self.kernel, self.code = kernel, code
        super().__init__(f"{call} failed for kernel {kernel!r}: {code} ({_status_name(code)})")


def _status_name(code: int) -> str:
    names = {v: k for k, v in vars(cl.status_code).items() if isinstance(v, int) and not k.startswith("_")}
    return names.get(code, "unknown OpenCL error")


def requested() -> str:
    """``$TIR_ADRENO_LAUNCHER`` (default auto); ValueError naming the variable for any other value."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"${ENV} must be one of {', '.join(CHOICES)}, got {value!r}")
    return value


def flush_requested() -> int:
    """``$TIR_ADRENO_LAUNCH_FLUSH`` (default 0: never): a clFlush after every that many launches."""
    value = os.environ.get(FLUSH_ENV, "").strip() or "0"
    if not value.isdigit():
        raise ValueError(f"${FLUSH_ENV} must be a count of launches (0: no flush), got {value!r}")
    return int(value)


def _library_paths() -> list[str]:
    """Candidates for the OpenCL library, the one pyopencl loaded first: its handles (queue,
    kernel) then go through the same ICD loader."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            paths += [line.split()[-1] for line in maps if "libOpenCL" in line and "/" in line]
    except OSError:  # not Linux
        pass
    package = os.path.dirname(cl.__file__)
    for pattern in (".libs/libOpenCL*", "../pyopencl.libs/libOpenCL*"):
        paths += sorted(glob.glob(os.path.join(package, pattern)))
    found = ctypes.util.find_library("OpenCL")
    if found:
        paths.append(found)
    return list(dict.fromkeys(paths))


@functools.lru_cache(maxsize=None)
def library() -> tuple[ctypes.CDLL | None, str]:
    """(the OpenCL library with argtypes set, its path), or (None, why not)."""
    reasons = []
    for path in _library_paths():
        try:
            lib = ctypes.CDLL(path)
            enqueue, flush = lib.clEnqueueNDRangeKernel, lib.clFlush
        except (OSError, AttributeError) as err:
            reasons.append(f"{path}: {err}")
            continue
        size_p = ctypes.POINTER(ctypes.c_size_t)
        enqueue.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, size_p, size_p, size_p,
                            ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        enqueue.restype = ctypes.c_int32
        flush.argtypes = [ctypes.c_void_p]
        flush.restype = ctypes.c_int32
        return lib, path
    return None, "; ".join(reasons) or "no OpenCL library found"


def resolve(kind: str | None = None) -> str:
    """The launcher that runs: "ctypes" or "pyopencl". ``kind`` None reads ``$TIR_ADRENO_LAUNCHER``;
    asking for ctypes where the library does not load is a RuntimeError saying why."""
    kind = requested() if kind is None else kind
    if kind not in CHOICES:
        raise ValueError(f"launcher must be one of {', '.join(CHOICES)}, got {kind!r}")
    if kind == "pyopencl":
        return kind
    lib, why = library()
    if lib is not None:
        return "ctypes"
    if kind == "ctypes":
        raise RuntimeError(f"ctypes launcher: cannot load the OpenCL library ({why})")
    return "pyopencl"


class Launcher:
    """Enqueues bound kernels ``[(pyopencl Kernel, global size, local size)]`` on one queue,
    in order, without events and without waiting. ``flush`` > 0 flushes the queue after every
    ``flush`` launches (not after the last: the caller waits then), so a driver that holds
    commands until a flush (NVIDIA's) starts the device while the host is still enqueuing."""

    kind = ""

    def __init__(self, queue, launches, flush: int = 0):
        self.queue = queue
        self.launches = list(launches)  # holds the kernels: their handles stay valid
        self.names = [kernel.function_name for kernel, _, _ in self.launches]
        self.flush = flush if 0 < flush < len(self.launches) else 0
        step = self.flush or len(self.launches) or 1
        #: Launch indices in runs, a flush between two runs.
        self.chunks = [range(i, min(i + step, len(self.launches))) for i in range(0, len(self.launches), step)]

    def __len__(self) -> int:
        return len(self.launches)


class PyOpenCLLauncher(Launcher):
    """The pure-Python path: pyopencl's enqueue (it makes an Event per launch, dropped here)."""

    kind = "pyopencl"

    def enqueue(self) -> None:
        enqueue, queue, launches = cl.enqueue_nd_range_kernel, self.queue, self.launches
        i = 0
        try:
            for n, chunk in enumerate(self.chunks):
                if n:
                    queue.flush()
                for i in chunk:
                    kernel, global_size, local_size = launches[i]
                    enqueue(queue, kernel, global_size, local_size)
        except cl.Error as err:
            raise LaunchError(self.names[i], err.code) from None


class CtypesLauncher(Launcher):
    """``clEnqueueNDRangeKernel`` through ctypes: every argument packed at construction, no event."""

    kind = "ctypes"

    def __init__(self, queue, launches, flush: int = 0):
        super().__init__(queue, launches, flush)
        lib, why = library()
        if lib is None:
            raise RuntimeError(f"ctypes launcher: cannot load the OpenCL library ({why})")
        self._enqueue, self._flush = lib.clEnqueueNDRangeKernel, lib.clFlush
        self._queue = ctypes.c_void_p(queue.int_ptr)
        args = []
        for kernel, global_size, local_size in self.launches:
            dims = len(global_size)
            sizes = ctypes.c_size_t * dims
            local = None
            if local_size is not None:
                if len(local_size) != dims:
                    raise ValueError(f"kernel {kernel.function_name!r}: local size {local_size} has not the "
                                     f"{dims} dimensions of global size {global_size}")
                local = sizes(*local_size)
            # Every argument already a ctypes object: the call converts nothing.
            args.append((self._queue, ctypes.c_void_p(kernel.int_ptr), ctypes.c_uint(dims), None,
                         sizes(*global_size), local, ctypes.c_uint(0), None, None))
        self._chunks = [[(i, args[i]) for i in chunk] for chunk in self.chunks]

    def enqueue(self) -> None:
        enqueue, flush, queue = self._enqueue, self._flush, self._queue
        for n, chunk in enumerate(self._chunks):
            if n:
                code = flush(queue)
                if code:
                    raise LaunchError(self.names[chunk[0][0] - 1], code, "clFlush")
            for i, args in chunk:
                code = enqueue(*args)
                if code:
                    raise LaunchError(self.names[i], code)


def make_launcher(queue, launches, kind: str | None = None, flush: int | None = None) -> Launcher:
    """A launcher of ``kind`` (None: ``$TIR_ADRENO_LAUNCHER``; auto: ctypes when the library
    loads) that flushes after every ``flush`` launches (None: ``$TIR_ADRENO_LAUNCH_FLUSH``)."""
    cls = CtypesLauncher if resolve(kind) == "ctypes" else PyOpenCLLauncher
    return cls(queue, launches, flush_requested() if flush is None else flush)
