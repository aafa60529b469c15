"""TVM 0.27 defect: ``floormod(c - t, m)`` of a loop or thread index ``t`` loses ``c`` in
``arith.IterMapSimplify``.

``Y[t] = X[T.floormod(5 - t, 3)]`` over 8 threads emits
``int rmod = t % -3; X[select(rmod - 3, rmod, rmod <= 0) * -1]``: ``floormod(-t, 3)``, so
thread 0 reads ``X[0]`` instead of ``X[2]``. The simplifier gives the right ``(2 - t) % 3``;
``FlattenBuffer`` then simplifies the index with ``IterMapSimplify``
(``IRMutatorWithAnalyzer::IterMapSimplifyWithContext``), which returns ``t % -3 * -1``:
``tvm.sym.iter_map_simplify([floormod(2 - t, 3)], {t: Range(0, 8)})`` alone shows it. Any
constant not a multiple of ``m`` (7 - t, 5 - t mod 4) does the same, and so does
``floordiv(c - t, m)`` (``t // -3``). A reversed slice (step -1) before a tile or a reshape makes such an index in a
kernel's view (``primfuncs/gather.py``). Workaround: shift the dividend to >= 0 by a multiple of
``m`` and take ``T.truncmod`` (``gather._nonneg_mod``).
"""

import operator

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


@pytest.mark.xfail(strict=True, raises=KnownDefect, reason="TVM 0.27: iter_map_simplify drops c from floormod/floordiv(c - t, m)")
@pytest.mark.parametrize("division, python, pinned_as", [("floormod", operator.mod, r"t % -3 \* -1"),
                                                         ("floordiv", operator.floordiv, r"t // -3")], ids=["floormod", "floordiv"])
def test_iter_map_simplify_keeps_the_constant_of_a_negated_index(division, python, pinned_as):
    """``floormod(2 - t, 3)`` comes back as ``t % -3 * -1`` and ``floordiv(2 - t, 3)`` as ``t // -3``
    (the same branch of ``SplitFloorModConst`` / ``SplitFloorDivConst``; ``gather._reshaped``
    divides a reversed run's index by truncation for the second)."""
    import tvm
    from tvm import sym, tirx

    t = tirx.Var("t", "int32")
    with pinned(rf"iter_map_simplify: {pinned_as}"):
        (got,) = sym.iter_map_simplify([getattr(tirx, division)(2 - t, 3)], {t: tvm.ir.Range(0, 8)}, True, check_level="surjective")
        for v in range(8):
            at = sym.Analyzer()
            at.bind(t, tirx.IntImm("int32", v))
            assert int(at.simplify(got)) == python(2 - v, 3), f"iter_map_simplify: {got}"


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
