"""TVM 0.27 defect: a texture store can write a stale value (OpenCL codegen SSA cache).

Two texture stores of one local pixel ``px`` with a write to ``px`` between
them: the lowered TIR is right (``texture2d_store(B, 0, ..., px[0:4])``,
``px[i] = px[i] * 2``, ``texture2d_store(B, 1, ..., px[0:4])``), but
CodeGenOpenCL prints the stored value through CodeGenC's SSA cache, keyed
by the expression's text and not invalidated by stores: both
``write_imagef`` calls use one ``float4 v = vload4(0, px_ptr + 0)`` taken
before the write, so the second pixel gets the first pixel's value.
Buffers (``vstore4(vload4(...))``, no SSA) are right. Workaround: store each
pixel from its own local buffer or row (textually distinct loads).
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
def store_twice(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "store_twice", "tirx.noalias": True})
    A = T.match_buffer(a, (1, 1, 1, 1, 4), "float32", scope="global.texture")
    B = T.match_buffer(b, (1, 1, 1, 2, 4), "float32", scope="global.texture")
    for i in T.thread_binding(1, thread="threadIdx.x"):
        with T.sblock("b"):
            px = T.sblock_alloc_buffer((4,), "float32", scope="local")
            for lane in T.vectorized(4):
                px[lane] = A[0, 0, 0, 0, lane]
            B[0, 0, 0, 0, T.Ramp(0, 1, 4)] = px[T.Ramp(0, 1, 4)]
            for lane in T.unroll(4):
                px[lane] = px[lane] * T.float32(2)
            B[0, 0, 0, 1, T.Ramp(0, 1, 4)] = px[T.Ramp(0, 1, 4)]


@pytest.mark.xfail(strict=True, raises=KnownDefect, reason="TVM 0.27: texture store value reused across a write to its local buffer")
def test_texture_store_after_local_write(device):
    with pinned(r"the second store wrote the first value: True"):
        module = build.build(store_twice)
        a = np.random.default_rng(0).standard_normal((1, 1, 1, 1, 4)).astype("float32")
        ta = device.array(a, "global.texture")
        tb = device.array(np.full((1, 1, 1, 2, 4), np.nan, "float32"), "global.texture")
        device.load(module)("store_twice", ta, tb)
        out = tb.numpy()
        np.testing.assert_array_equal(out[0, 0, 0, 0], a[0, 0, 0, 0])
        stale = np.array_equal(out[0, 0, 0, 1], a[0, 0, 0, 0])
        np.testing.assert_array_equal(
            out[0, 0, 0, 1], 2 * a[0, 0, 0, 0], err_msg=f"the second store wrote the first value: {stale}"
        )


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
