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

The repros call the simplifier on ``float32`` TIR nodes. The control: the same identities on
``int32`` (exact there), a float ``x - y`` left alone, and a float division by a nonzero
constant folded.
"""

import math

import pytest
import tvm
from tvm import sym
from tvm import tirx as tir

from defect import KnownDefect, pinned

FOLDED_TO_ZERO = r"AssertionError: float32 (x - x|x \* 0\.0) simplified to the constant 0\.0"
CANCELLED = r"AssertionError: float32 \(x \+ 1\.0\) - x simplified to the constant 1\.0"
FOLDED_TO_TRUE = r"AssertionError: float32 x == x simplified to True"
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


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the simplifier rewrites float x - x to 0.0 (NaN for x = inf or NaN)")
def test_self_difference_is_not_folded():
    x = tir.Var("x", "float32")
    got = simplify(tir.Sub(x, x))
    with pinned(FOLDED_TO_ZERO):
        assert not is_constant(got, 0.0), "float32 x - x simplified to the constant 0.0 (IEEE: NaN for x = inf or NaN)"


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the simplifier cancels float (x + y) - x to y (wrong for finite x too: rounding)")
def test_cancellation_is_not_folded():
    """Not only inf and NaN: in float32, ``(1e8 + 1) - 1e8`` is 0 (1e8 + 1 rounds to 1e8)."""
    x = tir.Var("x", "float32")
    got = simplify(tir.Sub(tir.Add(x, f32(1.0)), x))
    with pinned(CANCELLED):
        assert not is_constant(got, 1.0), "float32 (x + 1.0) - x simplified to the constant 1.0 (IEEE float32: 0.0 for x = 1e8)"


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the constant folder rewrites float x * 0.0 to 0.0 (NaN for x = inf or NaN)")
@pytest.mark.parametrize("built_by", ["simplify", "operator"])
def test_times_zero_is_not_folded(built_by):
    """``simplify`` on a ``Mul`` node, and the ``*`` operator itself (``tirx::mul`` folds when it builds)."""
    x = tir.Var("x", "float32")
    got = simplify(tir.Mul(x, f32(0.0))) if built_by == "simplify" else x * f32(0.0)
    with pinned(FOLDED_TO_ZERO):
        assert not is_constant(got, 0.0), "float32 x * 0.0 simplified to the constant 0.0 (IEEE: NaN for x = inf or NaN)"


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the simplifier rewrites float x == x to True (False for x = NaN)")
def test_self_equality_is_not_folded():
    x = tir.Var("x", "float32")
    got = simplify(tir.EQ(x, x))
    with pinned(FOLDED_TO_TRUE):
        assert not is_constant(got, 1), "float32 x == x simplified to True (IEEE: False for x = NaN)"


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: the constant folder raises 'Divide by zero' on a float divisor that simplifies to 0")
def test_division_by_a_folded_zero_simplifies():
    """``x / (x - x)``: the divisor folds to 0.0 (above), then the division stops the folder. IEEE: NaN
    everywhere (given the fold); without the fold, NaN too. Any expression is right but an error."""
    x = tir.Var("x", "float32")
    with pinned(DIVIDE_BY_ZERO, tvm.error.InternalError):
        simplify(tir.Div(x, tir.Sub(x, x)))


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
