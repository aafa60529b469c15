"""Building and timing conv plans (``tir_adreno.strategy.conv.ConvPlan``) as runnable programs.

:func:`build_program` builds a plan's stages (needs TVM; cached on disk) into a
:class:`ConvProgram`, which runs and times them with numpy and pyopencl alone.
``tir_adreno.tuning.tune`` and the benchmarks use these; compilation never measures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tir_adreno.runtime import opencl as runtime
from tir_adreno.runtime.bundle import KernelModule, TensorSpec

#: A faster candidate must beat a more accurate / earlier one by this fraction to win (timing noise).
TIE_MARGIN = 0.03
#: Per program and stage: warm-up runs, then repeats until about this many seconds (3..10 runs).
MEASURE_BUDGET_S = 0.5


# ---------------------------------------------------------------------------------------------
# Running a plan: its built kernels, chained


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


def build_program(plan) -> ConvProgram:
    """Build the stages of ``plan`` (a ``strategy.ConvPlan``) into one program (needs TVM; cached on disk)."""
    import tvm

    from tir_adreno.codegen import build

    funcs = plan.primfuncs()
    names = tuple(str(f.attrs["global_symbol"]) for f in funcs)
    half = build.ALL_BUFFERS if plan.storage else frozenset()  # half buffers under "float16_acc32"
    module = build.build_cached(funcs[0] if len(funcs) == 1 else tvm.IRModule(dict(zip(names, funcs))), half=half)
    module = module.with_storage(plan.storage)  # half images under "float16_acc32"
    return ConvProgram(plan.algorithm, module, tuple(module.functions) if len(funcs) == 1 else names)


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
        tensors[name] = device.empty(spec).upload(rng.standard_normal(spec.shape).astype(spec.dtype))
    first = program.run(device, tensors)  # also builds the OpenCL program
    return program.time(device, tensors, **_timing(first / max(len(program.stages), 1)))


def measure_programs(programs: dict, device) -> dict[str, float]:
    """Seconds per name of prebuilt ``programs`` (name -> :class:`ConvProgram`), TVM-free."""
    dev = runtime.get_device(device)
    return {name: measure_program(program, dev) for name, program in programs.items()}


def pick_algorithm(times: dict[str, float]) -> str:
    """The fastest candidate, unless an earlier one of ``times`` (ordered most accurate /
    preferred first, e.g. ``strategy.ALGORITHMS``) is within :data:`TIE_MARGIN` of it."""
    if not times:
        raise ValueError("no measurements to pick from")
    best = min(times.values())
    return next(name for name, t in times.items() if t <= best * (1 + TIE_MARGIN))
