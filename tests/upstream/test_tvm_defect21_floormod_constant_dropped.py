"""TVM 0.27 defect: ``floormod(c - t, m)`` of a thread index ``t`` is lowered without ``c``.

``Y[t] = X[T.floormod(5 - t, 3)]`` over 8 threads emits
``int rmod = t % -3; X[select(rmod - 3, rmod, rmod <= 0) * -1]``: ``floormod(-t, 3)``, so
thread 0 reads ``X[0]`` instead of ``X[2]``. The arithmetic simplifier alone is right
(``(2 - t) % 3``); the constant is lost where the floormod whose dividend may be negative is
lowered to C's truncating ``%``. Any constant not a multiple of ``m`` (7 - t, 5 - t mod 4) does
the same. A reversed slice (step -1) before a tile or a reshape makes such an index in a
kernel's view (``primfuncs/gather.py``). Workaround: shift the dividend to >= 0 by a multiple of
``m`` and take ``T.truncmod`` (``gather._nonneg_mod``).
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
def reversed_mod(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "reversed_mod", "tirx.noalias": True})
    X = T.match_buffer(a, (3,), "float32")
    Y = T.match_buffer(b, (8,), "float32")
    for t in T.thread_binding(8, thread="threadIdx.x"):
        with T.sblock("b"):
            vt = T.axis.spatial(8, t)
            Y[vt] = X[T.floormod(5 - vt, 3)]


@T.prim_func(s_tir=True)
def reversed_mod_shifted(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "reversed_mod_shifted", "tirx.noalias": True})
    X = T.match_buffer(a, (3,), "float32")
    Y = T.match_buffer(b, (8,), "float32")
    for t in T.thread_binding(8, thread="threadIdx.x"):
        with T.sblock("b"):
            vt = T.axis.spatial(8, t)
            Y[vt] = X[T.truncmod(5 - vt + 9, 3)]  # the workaround: >= 0 for every thread


def _run(device, func, name):
    x = np.arange(3, dtype="float32")
    tx, ty = device.array(x), device.array(np.full(8, np.nan, "float32"))
    device.load(build.build(func, build.OPENCL_TARGET))(name, tx, ty)
    return ty.numpy(), x[(5 - np.arange(8)) % 3]


@pytest.mark.xfail(strict=True, raises=KnownDefect, reason="TVM 0.27: floormod(c - t, m) of a thread index drops c")
def test_floormod_of_a_negated_thread_index_keeps_its_constant(device):
    with pinned(r"read X\[\(5 - t\) % 3\]: .*got \[0\. 2\. 1\. 0\. 2\. 1\. 0\. 2\.\]"):
        got, want = _run(device, reversed_mod, "reversed_mod")
        np.testing.assert_array_equal(got, want, err_msg=f"read X[(5 - t) % 3]: want {want}, got {got}")


def test_workaround_shifted_truncmod_is_right(device):
    got, want = _run(device, reversed_mod_shifted, "reversed_mod_shifted")
    np.testing.assert_array_equal(got, want)


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
