"""One program per model (runtime/link.py): sources with the same kernel names and macros,
linked, build into one program whose kernels compute what each source's did alone; a link the
compiler refuses falls back to one program per source."""

import numpy as np
import pytest

from tir_adreno.runtime import link, programs
from tir_adreno.runtime.bundle import FunctionPlan, KernelArg, KernelModule, Launch, TensorSpec


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    return tmp_path


def _source(scale: float, helper: str = "") -> str:
    """A TVM-like source: kernel ``main_kernel``, a macro every source defines differently."""
    return (f"#define SCALE {scale}f\n{helper}"
            "__kernel void main_kernel(__global float* restrict x, __global float* restrict y);\n"
            "__kernel void main_kernel(__global float* restrict x, __global float* restrict y) {\n"
            "  y[get_global_id(0)] = x[get_global_id(0)] * SCALE;\n}\n")


def _module(source: str, n: int) -> KernelModule:
    spec = lambda name: TensorSpec(name, (n,), "float32", "global")  # noqa: E731
    args = (KernelArg("tensor", 0), KernelArg("tensor", 1))
    return KernelModule(source, {"main": FunctionPlan("main", (spec("x"), spec("y")), (Launch("main_kernel", args, (n,), (1,)),))})


def _run_all(device, modules: dict, x: np.ndarray) -> dict:
    loaded = device.load_all(modules)()
    out = {}
    for name, module in loaded.items():
        a, b = device.array(x), device.empty(module["main"].params[1]).poison()
        module("main", a, b)
        out[name] = b.numpy()
    return out, loaded


def test_link_renames_kernels_and_undefines_macros():
    sources = [_source(2.0), _source(3.0)]
    linked = link.link(sources)
    assert linked.kernel_names == ({"main_kernel": "tir_adreno_k0_main_kernel"}, {"main_kernel": "tir_adreno_k1_main_kernel"})
    assert linked.source.count("#undef SCALE") == 2
    assert "void main_kernel(" not in linked.source
    assert link.linkable(sources)
    assert not link.linkable([sources[0], linked.source]), "an already linked source must not be linked again"
    assert not link.linkable([sources[0], "int helper(int a) { return a; }"]), "a source without a kernel"


def test_linked_program_runs_each_source_as_alone(device, cache_dir):
    x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    scales = {"a": 2.0, "b": 3.0, "c": -0.5, "a_again": 2.0}  # a_again: the same source as a
    modules = {name: _module(_source(s), 8) for name, s in scales.items()}
    before = device.program_counts.from_source + device.program_counts.from_binary
    out, loaded = _run_all(device, modules, x)
    assert device.program_counts.from_source + device.program_counts.from_binary == before + 1, "expected one program"
    assert len({id(m._program) for m in loaded.values()}) == 1
    for name, s in scales.items():
        np.testing.assert_array_equal(out[name], x * np.float32(s))


def test_a_link_the_compiler_refuses_builds_apart(device, cache_dir):
    """Two sources that define the same helper function cannot share a program."""
    helper = "float twice(float v) { return 2.0f * v; }\n"
    x = np.arange(4, dtype=np.float32)
    modules = {"a": _module(_source(2.0, helper), 4), "b": _module(_source(5.0, helper), 4)}
    with pytest.warns(programs.LinkWarning, match="did not build as one program"):
        out, loaded = _run_all(device, modules, x)
    assert len({id(m._program) for m in loaded.values()}) == 2
    np.testing.assert_array_equal(out["a"], 2 * x)
    np.testing.assert_array_equal(out["b"], 5 * x)
