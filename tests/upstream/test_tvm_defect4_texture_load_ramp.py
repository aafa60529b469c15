"""TVM 0.27 defect 4: a texture load with a ``T.Ramp`` index loses its lanes.

``A[n, c, h, w, T.Ramp(0, 1, 4)]`` on a ``global.texture`` buffer is a
float32x4 load (one RGBA pixel). ``TextureFlatten``
(``tvm.s_tir.backend.adreno.transform``) rewrites it into
``T.texture2d_load(A.data, w, h, c, 128, T.Ramp(0, 1, 4))`` typed
``float32`` instead of ``float32x4``. The Adreno TIR pipeline then stops in
``StorageRewrite`` with

    InternalError: Check failed: index_lanes == value_dtype.lanes() (4 vs. 1)

(storage_rewrite.cc, VectorTypeAccessChecker::OnArrayAccess), so a pixel
load written with a Ramp cannot be lowered at all. The same pixel read via a
``T.vectorized(4)`` loop works (see the control test in defect 3's file).
The store side of this kernel, ``B[..., Ramp] = L[Ramp]``, is the pattern
that works.
"""

import numpy as np
import pytest
import tvm
from tvm import s_tir
from tvm.s_tir.backend.adreno.pipeline import default_tir_pipeline
from tvm.script import tirx as T
from tvm.tirx.build import split_host_device_mods
from tvm.tirx.compilation_pipeline import finalize_device_passes
from defect import KnownDefect, pinned

N, C4, H, W = 1, 2, 2, 3
SHAPE = (N, C4, H, W, 4)


@T.prim_func(s_tir=True)
def copy_ramp_load(a: T.handle, b: T.handle):
    A = T.match_buffer(a, SHAPE, "float32", scope="global.texture")
    B = T.match_buffer(b, SHAPE, "float32", scope="global.texture")
    for c in T.thread_binding(C4, thread="blockIdx.y"):
        for h in T.thread_binding(H, thread="blockIdx.x"):
            for w in T.thread_binding(W, thread="threadIdx.x"):
                with T.sblock("copy"):
                    vc, vh, vw = T.axis.remap("SSS", [c, h, w])
                    L = T.sblock_alloc_buffer((4,), "float32", scope="local")
                    L[T.Ramp(0, 1, 4)] = A[0, vc, vh, vw, T.Ramp(0, 1, 4)]
                    B[0, vc, vh, vw, T.Ramp(0, 1, 4)] = L[T.Ramp(0, 1, 4)]


def _target():
    return tvm.target.Target("qcom/adreno-opencl-texture").with_host(tvm.target.Target("llvm"))


def _find(node, pred, found):
    """Collect the nodes under a TIR node for which `pred` holds (the wheel
    has no Python TIR visitor, so walk the reflected fields)."""
    if pred(node):
        found.append(node)
    if isinstance(node, (list, tuple, tvm.ir.Array)):
        for item in node:
            _find(item, pred, found)
    elif isinstance(node, tvm.runtime.Object):
        for field in ("body", "seq", "block", "value", "args", "condition", "then_case",
                      "else_case", "init", "a", "b"):
            child = getattr(node, field, None)
            if child is not None:
                _find(child, pred, found)
    return found


def _is_texture_load(node):
    return isinstance(node, tvm.ir.Call) and node.op.name == "tirx.texture2d_load"


def _is_load_of_a(node):
    return isinstance(node, tvm.ir.TensorLoad) and node.source.name == "A"


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: TextureFlatten types a Ramp-indexed texture2d_load as "
    "float32 instead of float32x4",
)
def test_texture_flatten_keeps_vector_type_of_ramp_load():
    with pinned(r"texture2d_load of a 4-lane Ramp is typed float32(\n|$)"):
        (load,) = _find(copy_ramp_load.body, _is_load_of_a, [])
        assert str(load.ty) == "float32x4"  # before lowering: a 4-lane pixel load

        target = _target()
        mod = tvm.tirx.transform.BindTarget(target)(tvm.IRModule({"main": copy_ramp_load}))
        with target:
            mod = s_tir.backend.adreno.transform.TextureFlatten()(mod)
        loads = _find(mod["main"].body, _is_texture_load, [])
        assert len(loads) == 1, mod["main"].script()
        assert str(loads[0].ty) == "float32x4", (
            f"texture2d_load of a 4-lane Ramp is typed {loads[0].ty}"
        )


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: a Ramp-indexed texture load fails to lower "
    "(StorageRewrite: index_lanes == value_dtype.lanes() (4 vs. 1))",
)
def test_ramp_texture_load_lowers_and_copies_exactly():
    with pinned(r"index_lanes == value_dtype.lanes\(\) \(4 vs. 1\)"):
        target = _target()
        mod = tvm.tirx.transform.BindTarget(target)(tvm.IRModule({"main": copy_ramp_load}))
        try:
            with target:
                mod = default_tir_pipeline()(mod)
        except tvm.error.InternalError as err:
            raise AssertionError(f"Adreno TIR pipeline fails on a Ramp texture load: {err}") from err
        _, device_mods = split_host_device_mods(mod)
        (device_mod,) = device_mods.values()
        device_mod = finalize_device_passes()(device_mod)
        src = tvm.get_global_func("target.build.opencl")(device_mod, target).inspect_source()

        cl = pytest.importorskip("pyopencl")
        try:
            devices = [d for p in cl.get_platforms() for d in p.get_devices() if d.image_support]
        except cl.Error:
            devices = []
        if not devices:
            pytest.skip("no OpenCL device with image support")
        ctx = cl.Context([devices[0]])
        queue = cl.CommandQueue(ctx)
        (kernel,) = cl.Program(ctx, src).build().all_kernels()
        a = np.random.default_rng().standard_normal(SHAPE).astype(np.float32)
        fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
        mf = cl.mem_flags
        region = (W, H, N * C4)
        img_a = cl.create_image(
            ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, fmt, shape=region, hostbuf=a, is_array=True
        )
        img_b = cl.create_image(ctx, mf.READ_WRITE, fmt, shape=region, is_array=True)
        cl.enqueue_fill_image(queue, img_b, np.full(4, np.nan, np.float32), (0, 0, 0), region)
        kernel(queue, (H * W, C4), (W, 1), img_a, img_b)
        out = np.empty_like(a)
        cl.enqueue_copy(queue, out, img_b, origin=(0, 0, 0), region=region)
        queue.finish()
        np.testing.assert_array_equal(out, a)


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
