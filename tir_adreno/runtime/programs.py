"""OpenCL programs from the binary cache or from source, built concurrently.

A device's programs are keyed by their binary key (source, device, driver, options:
``Device._binary_key``); :func:`build` reuses a valid cached binary under that key and
otherwise builds from source and stores the binary. :func:`start` builds a model's
programs in a thread pool (drivers release the GIL while they build, and every OpenCL call
here is on a distinct program, which the OpenCL spec makes thread-safe), so the caller can
read and upload weights meanwhile.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pyopencl as cl

from tir_adreno.runtime import cache

#: Most programs built at once (each build of a big kernel from source holds its compiler's memory).
MAX_WORKERS = 8


def build(device, source: str, options: str, key: str):
    """(how: "binary" or "source", milliseconds, the program) for ``source`` on ``device``."""
    start = time.perf_counter()
    how, program = _build(device, source, options, key)
    return how, (time.perf_counter() - start) * 1e3, program


def _build(device, source: str, options: str, key: str):
    path = cache.cache_dir() / "programs" / f"{key}.bin"
    binary = cache.read(path, key)
    if binary is not None:
        try:
            prg = cl._cl._Program(device.context, [device.cl_device], [binary])
            prg.build(options.encode(), [device.cl_device])
            return "binary", cl.Program(prg)
        except cl.Error:
            pass  # stale or foreign binary: rebuild from source below
    prg = cl._cl._Program(device.context, source)
    try:
        prg.build(options.encode(), [device.cl_device])
    except cl.Error as err:
        log = prg.get_build_info(device.cl_device, cl.program_build_info.LOG)
        raise RuntimeError(f"OpenCL build failed on {device.name}: {err}\n{log}{build_hint(log)}") from None
    (binary,) = prg.get_info(cl.program_info.BINARIES)
    if binary:
        cache.store(path, bytes(binary), key)
    return "source", cl.Program(prg)


def start(device, sources: dict[str, str], options: str, built: dict, counters):
    """Build every ``sources`` entry (binary key -> source) not in ``built`` (binary key ->
    program, the device's) in background threads (a single one: in the caller's thread, when
    waited for); returns a function that waits for them,
    adds them to ``built``, counts each (from source, from a binary, or already built in this
    process) in every one of ``counters`` and returns ``built``."""
    todo = [k for k in sources if k not in built]
    if len(todo) > 1:
        pool = ThreadPoolExecutor(max_workers=min(MAX_WORKERS, os.cpu_count() or 1, len(todo)))
        futures = {k: pool.submit(build, device, sources[k], options, k) for k in todo}
        pool.shutdown(wait=False)  # the threads end with their builds
        results = lambda: ((k, f.result()) for k, f in futures.items())  # noqa: E731
    else:  # nothing to overlap: build in the caller's thread when asked
        results = lambda: ((k, build(device, sources[k], options, k)) for k in todo)  # noqa: E731
    done = False

    def wait() -> dict:
        nonlocal done
        for k, (how, ms, program) in ([] if done else results()):
            built[k] = program
            for c in counters:
                c.add(how, ms)
        done = True
        return built

    return wait


def build_hint(log: str) -> str:
    if "unknown target CPU" in log:  # pip's PoCL 3.0 (LLVM 14) on a CPU LLVM 14 does not know (AMD Zen 5)
        return ("\nThis PoCL's LLVM does not know this CPU; install a newer PoCL "
                "(Debian/Ubuntu: apt-get install pocl-opencl-icd) and it is picked up automatically.")
    return ""
