"""Per-layer conv2d algorithm choice by measurement, remembered per device.

A 3x3 stride-1 conv (dilation 1, groups 1) can run as the direct conv or as
Winograd F(2x2, 3x3) or F(4x4, 3x3) (``primfuncs.conv2d_winograd``); which is
fastest depends on the device and the layer. :func:`choose_conv2d_algorithm`
answers with one of :data:`ALGORITHMS`: it looks the conv up in the device's
tuning file and, when allowed, measures each algorithm once on the device
(median OpenCL event time of its kernels, :meth:`ConvProgram.time`) and records
the winner. ``ops.conv2d(algorithm="auto")`` and the Relax pass ask it.

``$TIR_ADRENO_TUNING`` says what "auto" may do (default ``cached``):

- ``off``: always the direct conv; no file is read;
- ``cached``: a choice recorded for this device and conv is used, anything else
  runs direct; nothing is measured implicitly;
- ``on``: like ``cached``, and a conv without a recorded choice is measured once
  (building and timing every algorithm: seconds to a minute per new shape) and
  its winner recorded.

``cached`` is the default because measuring is expensive, happens on the device
that compiles (the deploy target may be another one), and can change numerics:
F(4x4) is held to 1e-3 relative in float32, direct and F(2x2) to 1e-4.
Tune on the device with ``TIR_ADRENO_TUNING=on`` (or :func:`choose_conv2d_algorithm`
with ``mode="on"``); later runs there reuse the choices.

The choices live in ``cache_dir()/tuning/<device-key>.json``, written atomically
with an integrity header (``cache.write``). A file that is corrupt, of another
format or recorded for other kernel sources (the ``primfuncs`` conv modules are
hashed into it) is discarded and its convs measured again.

This module imports TVM only to build kernels (:func:`build_program`); the
runner (:class:`ConvProgram`) and the measurement of prebuilt programs work
with numpy and pyopencl alone.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import cache, runtime, texture
from .bundle import KernelModule, TensorSpec

#: Algorithms "auto" chooses among, most accurate first (ties go to the earlier one).
ALGORITHMS = ("direct", "winograd_2x2", "winograd_4x4")
#: Winograd output tile m of each Winograd algorithm.
WINOGRAD_TILES = {"winograd_2x2": 2, "winograd_4x4": 4}
#: Environment variable and its values; see the module docstring.
ENV = "TIR_ADRENO_TUNING"
MODES = ("off", "cached", "on")
DEFAULT_MODE = "cached"
#: A faster algorithm must beat a more accurate one by this fraction to be chosen (timing noise).
TIE_MARGIN = 0.03
#: Per algorithm and stage: warm-up runs, then repeats until about this many seconds (3..10 runs).
MEASURE_BUDGET_S = 0.5
FORMAT = 1

_PRIMFUNC_SOURCES = ("conv2d.py", "conv2d_winograd.py", "epilogue.py", "_common.py")


def tuning_mode(mode: str | None = None) -> str:
    """``mode``, else ``$TIR_ADRENO_TUNING``, else :data:`DEFAULT_MODE`; ValueError when unknown."""
    value = mode if mode is not None else (os.environ.get(ENV) or DEFAULT_MODE)
    value = value.strip().lower()
    if value not in MODES:
        source = "mode" if mode is not None else f"${ENV}"
        raise ValueError(f"{source} must be one of {MODES}, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------
# Running an algorithm: its built kernels, chained


@dataclass(frozen=True)
class ConvProgram:
    """The built kernels of one conv algorithm, run in order (TVM-free).

    ``module`` holds ``stages`` (function names); each stage's last parameter is
    its output, parameters are matched across stages by name (``X``, ``W``/``U``,
    ``Bias``, ``Residual``, ``Y``; Winograd's intermediates ``V`` and ``M``).
    """

    algorithm: str
    module: KernelModule
    stages: tuple[str, ...]

    @property
    def specs(self) -> dict[str, TensorSpec]:
        out = {}
        for stage in self.stages:
            for spec in self.module[stage].params:
                out.setdefault(spec.name, spec)
        return out

    @property
    def outputs(self) -> tuple[str, ...]:
        """Each stage's output; the last is the conv's output."""
        return tuple(self.module[s].params[-1].name for s in self.stages)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Parameters the caller provides (not written by a stage), in stage order."""
        outs = set(self.outputs)
        return tuple(name for name in self.specs if name not in outs)

    @property
    def intermediates(self) -> tuple[str, ...]:
        return self.outputs[:-1]

    def bind(self, device: runtime.Device, tensors: dict) -> dict:
        """``tensors`` (name -> Tensor, the inputs and the output) plus poisoned intermediates."""
        specs = self.specs
        missing = [n for n in (*self.inputs, self.outputs[-1]) if n not in tensors]
        if missing:
            raise ValueError(f"{self.algorithm}: missing tensors {missing}; the program takes {list(specs)}")
        bound = dict(tensors)
        for name in self.intermediates:
            if name not in bound:
                bound[name] = device.empty(specs[name]).poison()
        return bound

    def _args(self, bound, stage):
        return [bound[p.name] for p in self.module[stage].params]

    def run(self, device: runtime.Device, tensors: dict) -> float:
        """Run every stage once; returns the summed kernel seconds (OpenCL events)."""
        loaded = device.load(self.module)
        bound = self.bind(device, tensors)
        return sum(loaded(stage, *self._args(bound, stage)) for stage in self.stages)

    def time(self, device: runtime.Device, tensors: dict, warmup: int = 2, repeat: int = 10) -> float:
        """Sum over the stages of their median OpenCL event time (``LoadedModule.time``)."""
        loaded = device.load(self.module)
        bound = self.bind(device, tensors)
        return sum(loaded.time(stage, self._args(bound, stage), warmup, repeat) for stage in self.stages)


def winograd_tile(algorithm: str) -> int:
    if algorithm not in WINOGRAD_TILES:
        raise ValueError(f"algorithm must be one of {tuple(WINOGRAD_TILES)}, got {algorithm!r}")
    return WINOGRAD_TILES[algorithm]


def placement(geom, algorithm: str, limits, scope: str = "global.texture", allow_buffer: bool = True):
    """``(scope, weight_scope, tile_scope)`` of ``algorithm`` for activations in ``scope``.

    Textures where they fit the device's ``limits``, else buffers. Weights follow
    ``allow_buffer`` like activations do; Winograd's intermediates ``V``/``M`` are
    internal and always fall back to buffers when too large.
    """
    if scope != texture.BUFFER_SCOPE and not texture.is_texture_scope(scope):
        raise ValueError(f"scope must be global.texture or global, got {scope!r}")
    if algorithm == "direct":
        weight_shape, tile_shapes = (geom.o4, geom.cg, geom.kh, geom.kw, 4), ()
    else:
        from primfuncs.conv2d_winograd import winograd_shapes

        s = winograd_shapes(geom, winograd_tile(algorithm))
        weight_shape, tile_shapes = s.weight, (s.tile, s.product)
    if scope == texture.BUFFER_SCOPE:
        return scope, scope, scope
    weight_scope = texture.place(weight_shape, "global.texture-weight", limits, allow_buffer)
    fits = all(limits.fits(shape, scope) for shape in tile_shapes)
    return scope, weight_scope, scope if fits else texture.BUFFER_SCOPE


def build_program(geom, algorithm: str, epilogue=None, dtype: str = "float32", scope: str = "global.texture",
                  weight_scope: str | None = None, tile_scope: str | None = None) -> ConvProgram:
    """Build ``algorithm``'s kernels for the conv ``geom`` (needs TVM; cached on disk)."""
    from primfuncs import conv2d, conv2d_winograd
    from primfuncs.epilogue import Epilogue

    from . import build

    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    epilogue = Epilogue() if epilogue is None else epilogue
    attrs = dict(strides=geom.strides, padding=geom.padding, dilation=geom.dilation, epilogue=epilogue, dtype=dtype,
                 scope=scope, weight_scope=weight_scope)
    data_shape, weight_shape = (geom.n, geom.c, geom.h, geom.w), (geom.o, geom.cg, geom.kh, geom.kw)
    if algorithm == "direct":
        if geom.is_depthwise:
            func = conv2d.depthwise_conv2d_nchw4c(data_shape, weight_shape, **attrs)
        else:
            func = conv2d.conv2d_nchw4c(data_shape, weight_shape, groups=geom.groups, **attrs)
        module = build.build_cached(func)
        return ConvProgram(algorithm, module, tuple(module.functions))
    kernels = conv2d_winograd.conv2d_winograd_nchw4c(
        data_shape, weight_shape, groups=geom.groups, m=winograd_tile(algorithm), tile_scope=tile_scope, **attrs
    )
    return ConvProgram(algorithm, build.build_cached(kernels.module()), kernels.names)


# ---------------------------------------------------------------------------------------------
# Measuring


def _timing(first_s: float) -> dict:
    repeat = int(MEASURE_BUDGET_S / first_s) if first_s > 0 else 10
    return dict(warmup=1, repeat=max(3, min(10, repeat)))


def measure_program(program: ConvProgram, device: runtime.Device, seed: int = 0) -> float:
    """Median kernel seconds of ``program`` on random inputs (outputs are not checked here)."""
    rng = np.random.default_rng(seed)
    specs = program.specs
    tensors = {}
    for name in (*program.inputs, program.outputs[-1]):
        spec = specs[name]
        tensors[name] = device.array(rng.standard_normal(spec.shape).astype(spec.dtype), spec.scope, name)
    first = program.run(device, tensors)  # also builds the OpenCL program
    return program.time(device, tensors, **_timing(first / max(len(program.stages), 1)))


def eligible_algorithms(geom) -> tuple[str, ...]:
    """The algorithms that can run ``geom`` (Winograd: 3x3, stride 1, dilation 1, groups 1)."""
    from primfuncs.conv2d_winograd import winograd_eligible

    return ALGORITHMS if winograd_eligible(geom) else ("direct",)


def measure_programs(programs: dict, device) -> dict[str, float]:
    """Seconds per algorithm of prebuilt ``programs`` (algorithm -> :class:`ConvProgram`), TVM-free."""
    dev = runtime.get_device(device)
    return {algorithm: measure_program(programs[algorithm], dev) for algorithm in ALGORITHMS if algorithm in programs}


def measure_conv2d(geom, device, dtype: str = "float32") -> dict[str, float]:
    """Seconds per eligible algorithm for the conv ``geom`` on ``device``.

    Each algorithm is built with the placement the device's image limits give and
    timed as a plain conv (no epilogue: it costs the same in every algorithm).
    Tests count measurements by patching this function.
    """
    dev = runtime.get_device(device)
    programs = {}
    for algorithm in eligible_algorithms(geom):
        scope, weight_scope, tile_scope = placement(geom, algorithm, dev.limits, _activation_scope(geom, dev))
        programs[algorithm] = build_program(geom, algorithm, None, dtype, scope, weight_scope, tile_scope)
    return measure_programs(programs, dev)


def _activation_scope(geom, dev) -> str:
    """Texture when input and output fit the device's images (what ops and the Relax pass do)."""
    shapes = [(geom.n, geom.c4, geom.h, geom.w, 4), (geom.n, geom.o4, geom.oh, geom.ow, 4)]
    return "global.texture" if all(dev.limits.fits(s, "global.texture") for s in shapes) else "global"


def pick_algorithm(times: dict[str, float]) -> str:
    """The fastest algorithm, unless a more accurate one is within :data:`TIE_MARGIN` of it."""
    if not times:
        raise ValueError("no measurements to pick from")
    best = min(times.values())
    for algorithm in ALGORITHMS:
        if algorithm in times and times[algorithm] <= best * (1 + TIE_MARGIN):
            return algorithm
    return min(times, key=times.get)


# ---------------------------------------------------------------------------------------------
# The per-device file


def device_key(device) -> str:
    """File-name-safe key of a device: its name plus a hash of platform, device and driver versions."""
    d = runtime.get_device(device).cl_device
    name = re.sub(r"[^a-z0-9]+", "-", d.name.strip().lower()).strip("-")[:40] or "device"
    digest = cache.key("tuning-device", d.platform.name, d.platform.version, d.name, d.version, d.driver_version)
    return f"{name}-{digest[:12]}"


def tuning_path(device) -> Path:
    return cache.cache_dir() / "tuning" / f"{device_key(device)}.json"


def conv2d_key(geom, dtype: str = "float32") -> str:
    """The record key of a conv: its logical shape, attributes and dtype."""
    pt, pl, pb, pr = geom.padding
    return (
        f"conv2d n{geom.n} c{geom.c} h{geom.h} w{geom.w} o{geom.o} k{geom.kh}x{geom.kw} "
        f"s{geom.strides[0]}x{geom.strides[1]} p{pt},{pl},{pb},{pr} d{geom.dilation[0]}x{geom.dilation[1]} "
        f"g{geom.groups} {dtype}"
    )


def kernels_version() -> str:
    """Hash of the conv kernel sources: choices measured on other kernels are stale."""
    root = Path(__file__).resolve().parents[1] / "primfuncs"
    parts = []
    for name in _PRIMFUNC_SOURCES:
        try:
            parts.append((root / name).read_bytes())
        except OSError:
            parts.append(b"missing")
    return cache.key("tuning-kernels", *parts)[:16]


def load_choices(device) -> dict[str, dict]:
    """The device's recorded choices (conv key -> entry); {} when missing, and a corrupt,
    foreign or stale file is discarded with a warning (its convs get measured again)."""
    path = tuning_path(device)
    payload = cache.read(path)
    if payload is None:
        if path.exists():
            warnings.warn(f"{path}: corrupt tuning file discarded (convs will be measured again)", RuntimeWarning, stacklevel=2)
        return {}
    try:
        data = json.loads(payload.decode())
        choices = data["choices"]
        ok = data.get("format") == FORMAT and isinstance(choices, dict) and all(
            isinstance(e, dict) and e.get("algorithm") in ALGORITHMS for e in choices.values()
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        ok = False
    if not ok:
        warnings.warn(f"{path}: unreadable tuning file discarded (convs will be measured again)", RuntimeWarning, stacklevel=2)
        return {}
    if data.get("kernels") != kernels_version():
        return {}  # measured on other kernels: stale, not an error
    return choices


def record(device, key: str, algorithm: str, times: dict[str, float]) -> Path:
    """Add (or replace) the choice for ``key`` in the device's file, atomically."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    dev = runtime.get_device(device)
    choices = dict(load_choices(dev))  # re-read: keep what other processes recorded meanwhile
    choices[key] = {
        "algorithm": algorithm,
        "times_s": {k: float(v) for k, v in times.items()},
        "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    data = {"format": FORMAT, "device": dev.name, "driver": dev.cl_device.driver_version.strip(),
            "kernels": kernels_version(), "choices": choices}
    path = tuning_path(dev)
    cache.write(path, json.dumps(data, indent=1, sort_keys=True).encode())
    return path


def choose_conv2d_algorithm(geometry, device=None, dtype: str = "float32", mode: str | None = None) -> str:
    """"direct", "winograd_2x2" or "winograd_4x4" for the conv ``geometry`` (a
    ``primfuncs.conv2d.ConvGeometry``) on ``device`` (default: ``runtime.get_device()``).

    Convs Winograd cannot run are always "direct". Otherwise ``mode`` (default
    ``$TIR_ADRENO_TUNING``, see the module docstring) decides: "off" -> direct;
    "cached" -> the recorded choice or direct; "on" -> the recorded choice, else
    measure every algorithm once (:func:`measure_conv2d`), record the winner
    (:func:`pick_algorithm`) and return it.
    """
    mode = tuning_mode(mode)
    if mode == "off" or eligible_algorithms(geometry) == ("direct",):
        return "direct"
    try:
        dev = runtime.get_device(device)
    except runtime.DeviceNotFoundError:
        if mode == "on" or device is not None:
            raise
        return "direct"  # compiling without an OpenCL device: nothing recorded to look up
    key = conv2d_key(geometry, dtype)
    entry = load_choices(dev).get(key)
    if entry is not None:
        return entry["algorithm"]
    if mode == "cached":
        return "direct"
    times = measure_conv2d(geometry, dev, dtype)
    algorithm = pick_algorithm(times)
    record(dev, key, algorithm, times)
    return algorithm
