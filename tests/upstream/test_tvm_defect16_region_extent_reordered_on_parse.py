"""TVM 0.27 defect 16: a printed read region does not parse back to the same extent.

An sblock's inferred read region can have an extent whose terms are in a non-canonical
order, e.g. over ``ty`` in 0..1 of ``A[clamp(by * 2 + ty - 1)] + A[clamp(by * 2 + ty + 1)]``:

    T.reads(A[m:m + (T.min(T.max(by, 0), 1) * 2 + T.min(T.max(by + 1, 0), 1) * 2 + 1 - m * 2)])

The printer writes it as ``start:start + extent``; the parser takes ``stop - start`` and
simplifies it, which puts ``T.min(T.max(by + 1, 0), 1) * 2`` first. The parsed PrimFunc is
equivalent but not structurally equal, so ``func.script()`` -> ``tvm.script.from_source``
is not exact (our split-K conv kernels, ``ConvConfig.split_k > 1``, hit it: see
tests/kernels/test_script_roundtrip.py). With one clamped access (the control) it round-trips.
"""

import pytest
import tvm
from tvm.script import tirx as T
from defect import KnownDefect, pinned


def test_control_one_access_round_trips():
    @T.prim_func(s_tir=True)
    def rows(A: T.Buffer((3,), "float32"), B: T.Buffer((4,), "float32")):
        for by in range(2):
            with T.sblock("tile"):
                for ty, kh in T.grid(2, 3):
                    with T.sblock("row"):
                        B[by * 2 + ty] = B[by * 2 + ty] + A[T.min(T.max(by * 2 + ty + kh - 1, 0), 2)]

    tvm.ir.assert_structural_equal(tvm.script.from_source(rows.script()), rows)


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: the parser re-derives a printed region's extent (stop - start, simplified), reordering its terms",
)
def test_two_clamped_accesses_round_trip():
    @T.prim_func(s_tir=True)
    def rows(A: T.Buffer((3,), "float32"), B: T.Buffer((4,), "float32")):
        for by in range(2):
            with T.sblock("tile"):
                for ty in range(2):
                    with T.sblock("row"):
                        B[by * 2 + ty] = A[T.min(T.max(by * 2 + ty - 1, 0), 2)] + A[T.min(T.max(by * 2 + ty + 1, 0), 2)]

    parsed = tvm.script.from_source(rows.script())
    with pinned(r"StructuralEqual check failed.*reads\[0\]\.region\[0\]\.extent", ValueError):
        tvm.ir.assert_structural_equal(parsed, rows)


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
