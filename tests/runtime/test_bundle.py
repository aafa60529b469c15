"""Kernel bundles: the launch plan read from TVM's host code, save/load, and running without TVM."""

import os
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT

from primfuncs import elementwise
from tir_adreno.codegen import build
from tir_adreno.runtime.bundle import KernelModule


def test_launch_plan_of_a_texture_kernel():
    module = build.build(elementwise.add((2, 3, 5, 7, 4)))
    plan = module["add"]
    assert [p.name for p in plan.params] == ["A", "B", "C"]
    assert {p.scope for p in plan.params} == {"global.texture"}
    (launch,) = plan.launches
    assert f"__kernel void {launch.kernel}(" in module.source
    assert [a.param for a in launch.args] == [0, 1, 2]
    # The NDRange covers W x H x (N * C4) pixels in whole work groups.
    gx, gy, gz = launch.global_size
    assert gx >= 7 and gy >= 5 and gz == 6
    assert all(g % l == 0 for g, l in zip(launch.global_size, launch.local_size))
    assert "write_imagef" in module.source and "read_imagef" in module.source.lower()


def test_generic_opencl_target_uses_buffers():
    module = build.build(elementwise.add((1, 1, 2, 2, 4), scope="global"), target=build.OPENCL_TARGET)
    assert "image2d_array_t" not in module.source
    assert "__global" in module.source


def test_save_load_roundtrip(tmp_path):
    module = build.build(elementwise.relu((1, 2, 3, 3, 4)))
    path = tmp_path / "relu.json"
    module.save(path)
    assert KernelModule.load(path).to_json() == module.to_json()
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="corrupt"):
        KernelModule.load(path)


def test_build_rejects_non_functions():
    with pytest.raises(TypeError, match="PrimFunc or IRModule"):
        build.build("not a function")


def test_runtime_runs_a_bundle_without_tvm(tmp_path):
    build.build(elementwise.relu((1, 2, 3, 3, 4))).save(tmp_path / "relu.json")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["tvm"] = None  # any TVM import now fails
        import numpy as np
        from tir_adreno.runtime.bundle import KernelModule
        from tir_adreno import runtime
        module = KernelModule.load({str(tmp_path / "relu.json")!r})
        dev = runtime.get_device()
        x = np.random.default_rng(0).standard_normal((1, 2, 3, 3, 4)).astype("float32")
        a = dev.array(x, "global.texture")
        b = dev.empty(module["relu"].params[1]).poison()
        dev.load(module)("relu", a, b)
        np.testing.assert_array_equal(b.numpy(), np.maximum(x, 0))
        assert not any(m == "tvm" or m.startswith("tvm.") for m, v in sys.modules.items() if v is not None)
        print("ok")
        """
    )
    root = ROOT
    res = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "ok"
