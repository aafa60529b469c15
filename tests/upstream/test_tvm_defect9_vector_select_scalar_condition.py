"""TVM 0.27 defect: a vectorized ``T.Select`` whose condition is a scalar (broadcast) is inverted.

``for lane in T.vectorized(4): B[i, lane] = T.Select(i >= 4, A[i, lane], 0)``
emits ``select(0, vload4(A), convert_int4((uint4)(c, c, c, c)))`` where
``c`` is a C boolean (0 or 1). OpenCL's vector ``select(a, b, m)`` picks by
the most significant bit of each lane of ``m``, so 1 reads as false: the
result is always the false operand. (A vector comparison, e.g.
``A[i, lane] > 0``, yields -1 per true lane and works.) Both the texture
target and generic OpenCL. Workaround: select per lane (``T.unroll``).
"""

import numpy as np
import pytest
from tvm.script import tirx as T

if __name__ == "__main__":  # standalone run: import this checkout's tir_adreno
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tir_adreno.codegen import build
from defect import KnownDefect, pinned


@T.prim_func(s_tir=True)
def select_rows(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "select_rows", "tirx.noalias": True})
    A = T.match_buffer(a, (8, 4), "float32")
    B = T.match_buffer(b, (8, 4), "float32")
    for i in T.thread_binding(8, thread="threadIdx.x"):
        with T.sblock("b"):
            vi = T.axis.spatial(8, i)
            for lane in T.vectorized(4):
                B[vi, lane] = T.Select(vi >= 4, A[vi, lane], T.float32(0))


@pytest.mark.xfail(strict=True, raises=KnownDefect, reason="TVM 0.27: vectorized Select on a scalar condition picks the false operand")
@pytest.mark.parametrize("target", [build.TEXTURE_TARGET, build.OPENCL_TARGET], ids=["adreno-texture", "opencl"])
def test_vectorized_select_with_scalar_condition(device, target):
    with pinned(r"rows >= 4 hold the false operand: True"):
        module = build.build(select_rows, target)
        a = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
        ta, tb = device.array(a), device.array(np.full_like(a, np.nan))
        device.load(module)("select_rows", ta, tb)
        out = tb.numpy()
        np.testing.assert_array_equal(
            out, np.where(np.arange(8)[:, None] >= 4, a, 0), err_msg=f"rows >= 4 hold the false operand: {np.all(out == 0)}"
        )


def _mask_compared_with_zero(src):
    """The select mask as the proposed codegen patch prints it: ``(convert_int4(c) != (int4)(0))``."""
    i = src.index("convert_int4(", src.index("select("))
    depth, j = 0, i + len("convert_int4")
    while True:
        depth += {"(": 1, ")": -1}.get(src[j], 0)
        if depth == 0:
            break
        j += 1
    return src[:i] + "(" + src[i : j + 1] + " != (int4)(0))" + src[j + 1 :]


def test_patch_defect9_emitted_mask_is_correct():
    """The C++ patch (docs/upstream/patches/defect09-vector-select-mask.diff) is untested; this
    checks the code it would emit: the generated kernel with its select mask compared with zero
    runs correctly on OpenCL, the kernel as generated does not."""
    cl = pytest.importorskip("pyopencl")
    import tvm

    lib = tvm.tirx.build(select_rows, tvm.target.Target({"kind": "opencl"}, host={"kind": "llvm"}))
    (dev,) = [m for m in lib.imports if m.kind == "opencl"]
    src = dev.inspect_source()
    ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
    queue = cl.CommandQueue(ctx)
    a = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
    want = np.where(np.arange(8)[:, None] >= 4, a, 0)
    results = []
    for source in (src, _mask_compared_with_zero(src)):
        (kernel,) = cl.Program(ctx, source).build().all_kernels()
        mf = cl.mem_flags
        buf_a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        buf_b = cl.Buffer(ctx, mf.READ_WRITE, a.nbytes)
        kernel(queue, (8,), (8,), buf_a, buf_b)
        out = np.empty_like(a)
        cl.enqueue_copy(queue, out, buf_b)
        queue.finish()
        results.append(np.array_equal(out, want))
    assert results == [False, True]


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
