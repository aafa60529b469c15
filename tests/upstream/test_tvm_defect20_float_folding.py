"""TVM 0.27 defect 20: the arithmetic simplifier folds float expressions as -ffast-math does, and stops on a float x / 0.

TVM's ``arith`` simplifier (``tvm.sym.Analyzer().simplify``, run by most TIR passes) applies
real-number identities to floating-point expressions: ``x - x`` becomes ``0.0`` and
``(x + y) - x`` becomes ``y`` (``src/arith/rewrite_simplify.cc``, the non-index branch of the Sub
rules), ``x * 0.0`` becomes ``0.0`` (``src/arith/const_fold.h`` ``TryConstFold<Mul>``, also run by
the ``*`` operator), ``x == x`` becomes ``True`` (the EQ rules). IEEE 754 gives NaN for ``x - x``
and ``x * 0`` when ``x`` is inf or NaN, False for ``NaN == NaN``, and 0 for ``(x + 1) - x`` in
float32 at ``x = 1e8`` (rounding); there is no flag to ask for IEEE semantics. And the constant
folder (``TryConstFold<Div>``) raises an internal error on a float division by a zero constant,
which IEEE defines (+-inf, NaN for 0 / 0): a kernel whose divisor simplifies to zero,
``x / (y - y)``, cannot be simplified, so cannot be built.

The repros call the simplifier on ``float32`` TIR nodes, and build one kernel for LLVM. The control: the same identities on
``int32`` (exact there), a float ``x - y`` left alone, and a float division by a nonzero
constant folded.
"""

import math

import pytest
import tvm
from tvm import sym
from tvm import tirx as tir
from tvm.script import tirx as T

from defect import KnownDefect, pinned

FOLDED = r"AssertionError: float32 .+ simplified to the constant "
DIVIDE_BY_ZERO = r"InternalError: .*Divide by zero"


def simplify(expr):
    return sym.Analyzer().simplify(expr)


def f32(value):
    return tir.FloatImm("float32", value)


def is_constant(expr, value):
    return isinstance(expr, (tir.IntImm, tir.FloatImm)) and float(expr.value) == value


def test_control_exact_identities_and_nonzero_division():
    i = tir.Var("i", "int32")
    x, y = tir.Var("x", "float32"), tir.Var("y", "float32")
    assert is_constant(simplify(i - i), 0)  # integers have no inf or NaN: exact
    assert is_constant(simplify(tir.Mul(i, tir.IntImm("int32", 0))), 0)
    assert not is_constant(simplify(x - y), 0.0)
    assert is_constant(simplify(tir.Div(f32(1.0), f32(4.0))), 0.25)


#: name -> (the expression as TVM returns it from ``x``, the constant TVM folds it to, what IEEE gives instead)
IDENTITIES = {
    "x - x": (lambda x: simplify(tir.Sub(x, x)), 0.0, "NaN for x = inf or NaN"),
    "(x + 1.0) - x": (lambda x: simplify(tir.Sub(tir.Add(x, f32(1.0)), x)), 1.0, "0.0 in float32 for x = 1e8: 1e8 + 1 rounds to 1e8"),
    "x * 0.0": (lambda x: simplify(tir.Mul(x, f32(0.0))), 0.0, "NaN for x = inf or NaN"),
    "x * 0.0 (operator)": (lambda x: x * f32(0.0), 0.0, "NaN for x = inf or NaN; the * operator folds as it builds"),
    "x == x": (lambda x: simplify(tir.EQ(x, x)), 1, "False for x = NaN"),
}


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the simplifier applies real-number identities to floats (fast-math), with no IEEE mode")
@pytest.mark.parametrize("identity", sorted(IDENTITIES), ids=sorted(IDENTITIES))
def test_float_identity_is_not_applied(identity):
    build, folded, ieee = IDENTITIES[identity]
    got = build(tir.Var("x", "float32"))
    with pinned(FOLDED):
        assert not is_constant(got, folded), f"float32 {identity} simplified to the constant {got} (IEEE: {ieee})"


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the constant folder raises 'Divide by zero' on a float divisor that simplifies to 0")
def test_division_by_a_folded_zero_simplifies():
    """``x / (x - x)``: the divisor folds to 0.0 (above), then the division stops the folder. IEEE:
    +-inf for a finite nonzero x, NaN for 0, inf and NaN. Any expression is right but an error."""
    x = tir.Var("x", "float32")
    with pinned(DIVIDE_BY_ZERO, tvm.error.InternalError):
        simplify(tir.Div(x, tir.Sub(x, x)))


@T.prim_func
def divide_by_self_difference(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] / (A[i] - A[i])


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: a kernel whose float divisor simplifies to 0 cannot be built ('Divide by zero')")
def test_kernel_dividing_by_a_folded_zero_builds():
    """The same through ``tvm.compile`` (LLVM): the build pipeline simplifies, so the kernel cannot be built."""
    with pinned(DIVIDE_BY_ZERO, tvm.error.InternalError):
        tvm.compile(divide_by_self_difference, target="llvm")


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the constant folder raises 'Divide by zero' on float constants instead of IEEE's inf/NaN")
@pytest.mark.parametrize("numerator", [1.0, -1.0, 0.0], ids=["one", "minus-one", "zero"])
def test_constant_division_by_zero_folds_to_ieee(numerator):
    expected = math.copysign(math.inf, numerator) if numerator else math.nan  # IEEE: +-inf by the signs, 0 / 0 NaN
    with pinned(DIVIDE_BY_ZERO, tvm.error.InternalError):
        got = simplify(tir.Div(f32(numerator), f32(0.0)))
    assert isinstance(got, tir.FloatImm), f"{numerator} / 0.0 simplified to {type(got).__name__}, not a constant"
    value = float(got.value)
    assert (math.isnan(value) if math.isnan(expected) else value == expected), f"{numerator} / 0.0 folded to {value}"


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
