"""Kernel launchers: enqueue a list of bound kernels with as little host time as possible.

pyopencl's ``enqueue_nd_range_kernel`` converts the sizes and creates an Event on
every launch: on the H200 (NVIDIA's driver, profiling queue) 17.9 us per launch
against 11.4 us through ctypes without an event, and MobileNetV2's wall time per
run 1.29 ms against 0.83 ms. :class:`CtypesLauncher` calls ``clEnqueueNDRangeKernel``
of the OpenCL library pyopencl itself loaded, with the arguments packed once and no
event; :class:`PyOpenCLLauncher` is the pure-Python fallback. ``$TIR_ADRENO_LAUNCHER``
(auto, ctypes, pyopencl) picks one; auto takes ctypes when the library loads.

No clFlush between launches: measured with a flush after every 2, 4 or 16 launches it gained
nothing on PoCL (which starts each command as it is enqueued) and cost MobileNetV2 6-9% of
its wall time on the H200 (whose driver submits while the host enqueues).

Importable without TVM.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os

import pyopencl as cl
from tir_adreno.runtime.errors import SettingError

ENV = "TIR_ADRENO_LAUNCHER"
CHOICES = ("auto", "ctypes", "pyopencl")


class LaunchError(RuntimeError):
    """An enqueue failed; ``code`` is the OpenCL error code, the message names the kernel."""

    def __init__(self, kernel: str, code: int):
        self.kernel, self.code = kernel, code
        super().__init__(f"clEnqueueNDRangeKernel failed for kernel {kernel!r}: {code} ({_status_name(code)})")


def _status_name(code: int) -> str:
    names = {v: k for k, v in vars(cl.status_code).items() if isinstance(v, int) and not k.startswith("_")}
    return names.get(code, "unknown OpenCL error")


def requested() -> str:
    """``$TIR_ADRENO_LAUNCHER`` (default auto); ValueError naming the variable for any other value."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise SettingError(f"${ENV} must be one of {', '.join(CHOICES)}, got {value!r}")
    return value


def _library_paths():
    """Candidates for the OpenCL library, the one pyopencl loaded first: its handles (queue,
    kernel) then go through the same ICD loader. A generator: ``ctypes.util.find_library``
    runs ldconfig (tens of ms at start-up), so it is asked only when the others failed."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            paths += [line.split()[-1] for line in maps if "libOpenCL" in line]
    except OSError:  # not Linux
        pass
    package = os.path.dirname(cl.__file__)
    for pattern in (".libs/libOpenCL*", "../pyopencl.libs/libOpenCL*"):
        paths += sorted(glob.glob(os.path.join(package, pattern)))
    # maps may list a deleted file
    yield from (p for p in dict.fromkeys(paths) if os.path.isfile(p))
    found = ctypes.util.find_library("OpenCL")
    if found and found not in paths:
        yield found  # a bare name: dlopen searches for it


@functools.lru_cache(maxsize=None)
def library() -> tuple[ctypes.CDLL | None, str]:
    """(the OpenCL library, its enqueue's restype set, its path), or (None, why not)."""
    reasons = []
    for path in _library_paths():
        try:
            lib = ctypes.CDLL(path)
            enqueue = lib.clEnqueueNDRangeKernel
        except (OSError, AttributeError) as err:
            reasons.append(f"{path}: {err}")
            continue
        # No argtypes for the enqueue, on purpose: CtypesLauncher packs every argument as its
        # exact C type once, and per-argument from_param checks would double the cost of each
        # call (measured on PoCL: 1.2 vs 0.6 us).
        enqueue.restype = ctypes.c_int32
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
    in order, without events and without waiting."""

    kind = ""

    def __init__(self, queue, launches):
        self.queue = queue
        self.launches = list(launches)  # holds the kernels: their handles stay valid
        self.names = [kernel.function_name for kernel, _, _ in self.launches]

    def __len__(self) -> int:
        return len(self.launches)


class PyOpenCLLauncher(Launcher):
    """The pure-Python path: pyopencl's enqueue (it makes an Event per launch, dropped here)."""

    kind = "pyopencl"

    def enqueue(self) -> None:
        enqueue, queue = cl.enqueue_nd_range_kernel, self.queue
        i = 0
        try:
            for i, (kernel, global_size, local_size) in enumerate(self.launches):
                enqueue(queue, kernel, global_size, local_size)
        except cl.Error as err:
            raise LaunchError(self.names[i], err.code) from None


class CtypesLauncher(Launcher):
    """``clEnqueueNDRangeKernel`` through ctypes: every argument packed at construction, no event."""

    kind = "ctypes"

    def __init__(self, queue, launches):
        super().__init__(queue, launches)
        lib, why = library()
        if lib is None:
            raise RuntimeError(f"ctypes launcher: cannot load the OpenCL library ({why})")
        self._enqueue = lib.clEnqueueNDRangeKernel
        self._queue = ctypes.c_void_p(queue.int_ptr)
        self._args = []
        for kernel, global_size, local_size in self.launches:
            dims = len(global_size)
            sizes = ctypes.c_size_t * dims
            local = None
            if local_size is not None:
                if len(local_size) != dims:
                    raise ValueError(f"kernel {kernel.function_name!r}: local size {local_size} has not the "
                                     f"{dims} dimensions of global size {global_size}")
                local = sizes(*local_size)
            # clEnqueueNDRangeKernel(queue, kernel, work_dim, global_work_offset, global_work_size,
            # local_work_size, num_events_in_wait_list, event_wait_list, event): each argument a
            # ctypes object of its C type (pointers as c_void_p or size_t arrays, cl_uint as
            # c_uint, NULL as None), so the call converts nothing.
            self._args.append((self._queue, ctypes.c_void_p(kernel.int_ptr), ctypes.c_uint(dims), None,
                               sizes(*global_size), local, ctypes.c_uint(0), None, None))

    def enqueue(self) -> None:
        enqueue = self._enqueue
        for i, args in enumerate(self._args):
            code = enqueue(*args)
            if code:
                raise LaunchError(self.names[i], code)


def make_launcher(queue, launches, kind: str | None = None) -> Launcher:
    """A launcher of ``kind`` (None: ``$TIR_ADRENO_LAUNCHER``; auto: ctypes when the library loads)."""
    cls = CtypesLauncher if resolve(kind) == "ctypes" else PyOpenCLLauncher
    return cls(queue, launches)
