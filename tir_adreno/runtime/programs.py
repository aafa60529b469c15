"""OpenCL programs from the binary cache or from source, built in background threads.

A device's programs are keyed by their binary key (source, device, driver, options:
``Device._binary_key``; a model's linked program: ``Device._linked_key``); :func:`build`
reuses a valid cached binary under that key and otherwise builds from source and stores the
binary. :func:`start` builds programs in background threads (drivers release the GIL while
they build, and every OpenCL call here is on a distinct program, which the OpenCL spec makes
thread-safe), so the caller can read and upload weights meanwhile.
"""

from __future__ import annotations

import logging
import os
import re
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyopencl as cl

from tir_adreno.runtime import cache, link, pocl_binary

#: Most programs built at once (each build of a big kernel from source holds its compiler's memory).
MAX_WORKERS = 8

#: Where a long build from source is announced (``logging``: the CLI shows it on stderr, ``--quiet`` hides it).
log = logging.getLogger("tir_adreno.programs")
#: Rough seconds an OpenCL compiler spends per kernel of a program built from source: PoCL (CPU)
#: built ResNet-18's 21 kernels in 22 s (issue 39); GPU drivers are several times faster
#: (NVIDIA: a cold MobileNetV2 start of 7.6 s, docs/startup.md).
SECONDS_PER_KERNEL = {"cpu": 1.0, "gpu": 0.15}
#: Builds estimated shorter than this are not announced (a single kernel, the kernel tour).
ANNOUNCE_MIN_S = 5.0


class BuildError(RuntimeError):
    """The OpenCL compiler refused a program (its build log is in the message)."""


def build(device, source: "str | Callable[[], str]", options: str, key: str):
    """(how: "binary" or "source", milliseconds, the program) for ``source`` on ``device``
    (a callable: made only when no cached binary is found)."""
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
    text = source if isinstance(source, str) else source()
    _announce(device, text)
    prg = cl._cl._Program(device.context, device.program_source(text))  # the half prelude where the device needs it
    try:
        prg.build(options.encode(), [device.cl_device])
    except cl.Error as err:
        log = prg.get_build_info(device.cl_device, cl.program_build_info.LOG)
        raise BuildError(f"OpenCL build failed on {device.name}: {err}\n{log}{build_hint(log)}") from None
    (binary,) = prg.get_info(cl.program_info.BINARIES)
    if binary:
        stored = pocl_binary.for_cache(binary)  # PoCL's without its IR: a warm load parses none
        cache.store(path, stored, key)
        if stored != bytes(binary):  # PoCL's, its IR dropped (a format it does not read stays whole: nothing to check)
            # PoCL unpacks a binary into its own cache when a program is made from it: now, not on the first warm start
            try:
                cl._cl._Program(device.context, [device.cl_device], [stored])
            except cl.Error:  # this PoCL refuses it after all: cache the binary whole
                cache.store(path, bytes(binary), key)
    return "source", cl.Program(prg)


def _announce(device, text: str) -> None:
    """Log what a long build from source is and about how long it takes (users wait on it once:
    the binary is cached)."""
    kernels = len(set(re.findall(r"__kernel\s+void\s+(\w+)", text)))  # a kernel may be written twice (#if branches)
    kind = "cpu" if device.cl_device.type & cl.device_type.CPU else "gpu"
    estimate = kernels * SECONDS_PER_KERNEL[kind]
    if estimate >= ANNOUNCE_MIN_S:
        log.info(f"building the OpenCL program of {kernels} kernel{'s' if kernels != 1 else ''} from source on {device.name}, about {estimate:.0f} s "
                 f"(once: later runs load its binary from the cache)")


def start(device, sources: dict, options: str, built: dict, counters, background: bool = True, after=None):
    """Build every ``sources`` entry (binary key -> source, see :func:`build`) not in ``built``
    (binary key -> program, the device's) in background threads (none when ``background`` is
    false and there is one: it is built in the caller's thread when waited for), then call
    ``after(program)`` there if given; returns a function that waits for them, adds them to
    ``built``, counts each (from source, from a binary) in every one of ``counters`` and
    returns ``built``."""
    todo = [k for k in sources if k not in built]

    def build_then(k):
        result = build(device, sources[k], options, k)
        if after is not None:
            after(result[2])
        return result

    if len(todo) > 1 or (todo and background):
        pool = ThreadPoolExecutor(max_workers=min(MAX_WORKERS, os.cpu_count() or 1, len(todo)))
        futures = {k: pool.submit(build_then, k) for k in todo}
        pool.shutdown(wait=False)  # the threads end with their builds
        results = lambda: ((k, f.result()) for k, f in futures.items())  # noqa: E731
    else:  # nothing to overlap: build in the caller's thread when asked
        results = lambda: ((k, build_then(k)) for k in todo)  # noqa: E731
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


class LinkWarning(RuntimeWarning):
    """A model's kernels did not build as one program; each source is built on its own."""


def start_model(device, modules: dict, options: str, counters, source_id: str | None = None):
    """Start building the programs of ``modules`` (name -> KernelModule) on ``device`` in the
    background: their distinct sources linked into one program (:mod:`tir_adreno.runtime.link`)
    where they can be, else one program per distinct source. Its key: the linked source's
    (``Device._binary_key``), or, given ``source_id`` (a digest that already covers the sources,
    e.g. model.json's checksum), one made from that (``Device._linked_key``), so no source is
    hashed or even linked unless the binary cache misses. A new linked program's kernel objects
    are made in the same thread once it is built (pyopencl spends about 0.3 ms on each).
    Returns a function that waits and gives ``{name: (program, kernel names in it or None,
    made kernels: name -> [Kernel] or None)}``; a linked program the compiler refuses is built
    source by source instead, with a :class:`LinkWarning`."""
    distinct = list(dict.fromkeys(m.source for m in modules.values()))
    if len(distinct) < 2 or not link.linkable(distinct):
        return _start_apart(device, modules, options, counters)
    index = {s: i for i, s in enumerate(distinct)}
    names = link.kernel_names(distinct)
    if source_id is None:
        source = link.link(distinct).source
        key = device._binary_key(source, options)
    else:
        key, source = device._linked_key(source_id, options, distinct), lambda: link.link(distinct).source
    made: dict[str, list] = {}  # kernel name -> kernel objects made ahead (LoadedModule takes them)

    def make_kernels(program) -> None:
        for kernels in names:
            for new in kernels.values():
                try:
                    made.setdefault(new, []).append(cl.Kernel(program, new))
                except cl.Error:  # not a kernel after all (e.g. inside #if 0): bind() says so if asked for
                    pass

    wait = _start_counted(device, {key: source}, options, counters, after=make_kernels)

    def ready() -> dict:
        try:
            program = wait()[key]
        except BuildError as err:
            warnings.warn(f"{device.name}: the model's {len(distinct)} kernel sources did not build as one program "
                          f"({str(err).splitlines()[0]}); building them one by one", LinkWarning, stacklevel=3)
            return _start_apart(device, modules, options, counters)()
        return {name: (program, names[index[m.source]], made) for name, m in modules.items()}

    return ready


def _start_apart(device, modules: dict, options: str, counters):
    """:func:`start_model` with one program per distinct source (no renamed kernels)."""
    keys = {name: device._binary_key(m.source, options) for name, m in modules.items()}  # each source hashed once
    sources = {key: modules[name].source for name, key in keys.items()}
    wait = _start_counted(device, sources, options, counters, background=len(modules) > 1)
    return lambda: {name: (built[key], None, None) for built in [wait()] for name, key in keys.items()}


def _start_counted(device, sources: dict, options: str, counters, background: bool = True, after=None):
    """:func:`start` on the device's programs, counting those already built in this process."""
    for key in sources:
        if key in device._programs:
            for c in counters:
                c.add("in_process")
    return start(device, sources, options, device._programs, counters, background, after)


def build_hint(log: str) -> str:
    if "unknown target CPU" in log:  # pip's PoCL 3.0 (LLVM 14) on a CPU LLVM 14 does not know (AMD Zen 5)
        return ("\nThis PoCL's LLVM does not know this CPU; install a newer PoCL "
                "(Debian/Ubuntu: apt-get install pocl-opencl-icd) and it is picked up automatically.")
    return ""
