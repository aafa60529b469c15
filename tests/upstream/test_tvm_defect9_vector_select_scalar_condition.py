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


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
