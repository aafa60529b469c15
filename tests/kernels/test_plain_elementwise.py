"""The plain-buffer elementwise kernel (``primfuncs.plain_elementwise``) against float64 NumPy:
random ranks and broadcast shapes, random expressions over every op and activation of the table,
random inputs with NaN and infinities mixed in, float32 and half buffers (float16_acc32), on
NaN-poisoned outputs (a finite poison where NaN is expected)."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.numeric import run_kernel
from primfuncs import epilogue_expr as ex
from primfuncs import plain_elementwise as pe
from primfuncs.activation_table import TABLE, numpy_activation
from tir_adreno.codegen import build

#: float64 NumPy of each op (NaN and Inf as NumPy has them).
NUMPY_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
                "maximum": np.maximum, "minimum": np.minimum, "pow": np.power}
NUMPY_UNARY = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "neg": np.negative, "abs": np.abs,
               "reciprocal": lambda x: 1.0 / x, "erf": np.vectorize(math.erf, otypes=[np.float64]), "tanh": np.tanh}
#: Parameters drawn for the parametrized activations.
ACT_PARAMS = {"clip": (("lo", -0.5), ("hi", 2.0)), "leaky_relu": (("alpha", 0.2),), "hardsigmoid": (("alpha", 0.25), ("beta", 0.4))}


def reference(expr, xs):
    if isinstance(expr, ex.Input):
        return xs[expr.index]
    if isinstance(expr, ex.Const):
        return np.float64(expr.value)
    if isinstance(expr, ex.Binary):
        return NUMPY_BINARY[expr.op](reference(expr.a, xs), reference(expr.b, xs))
    if expr.op in NUMPY_UNARY:
        return NUMPY_UNARY[expr.op](reference(expr.arg, xs))
    params = dict(expr.params)
    if expr.op == "clip":
        y = reference(expr.arg, xs)
        y = y if params["lo"] is None else np.maximum(y, params["lo"])
        return y if params["hi"] is None else np.minimum(y, params["hi"])
    return numpy_activation(reference(expr.arg, xs), expr.op, **params)


def clip(lo, hi, x):
    return ex.Unary("clip", x, (("lo", lo), ("hi", hi)))


def exprs(inputs: int):
    """Random expressions reading inputs ``0..inputs-1`` (each at least once: the leaves cycle)."""
    leaf = st.one_of(st.builds(ex.Input, st.integers(0, inputs - 1)),
                     st.builds(ex.Const, st.sampled_from([2.0, 3.0, 0.5, -1.0, 1.5, 6.0])))
    acts = st.sampled_from(sorted(TABLE)).map(lambda n: (n, ACT_PARAMS.get(n, ())))

    def extend(child):
        return st.one_of(st.builds(ex.Binary, st.sampled_from(sorted(NUMPY_BINARY)), child, child),
                         st.builds(ex.Unary, st.sampled_from(sorted(NUMPY_UNARY)), child),
                         st.builds(clip, st.sampled_from([None, -1.0]), st.sampled_from([None, 1.0]), child),
                         acts.flatmap(lambda a: st.builds(ex.Unary, st.just(a[0]), child, st.just(a[1]))))

    def reads_all(e):
        return ex.inputs_read(e) == set(range(inputs))

    tree = st.recursive(leaf, extend, max_leaves=6)
    return tree.map(lambda e: e if reads_all(e) else _with_inputs(e, inputs)).filter(reads_all)


def _with_inputs(e, inputs):
    for i in range(inputs):
        e = ex.Binary("add", e, ex.Input(i))
    return e


@st.composite
def cases(draw):
    rank = draw(st.integers(1, 4))
    out = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    if draw(st.booleans()):
        out = (*out[:-1], draw(st.sampled_from([4, 8, 12])))  # vector loads along the last axis
    inputs = draw(st.integers(1, pe.MAX_INPUTS))
    shapes = [out] + [tuple(d if draw(st.booleans()) else 1 for d in out)[draw(st.integers(0, rank - 1)):] for _ in range(inputs - 1)]
    shapes = draw(st.permutations(shapes))
    return out, tuple(shapes), draw(exprs(inputs))


def _inputs(rng, shapes, specials):
    xs = []
    for s in shapes:
        x = (rng.standard_normal(s) * 3).astype(np.float32)
        if specials:
            flat = x.reshape(-1)
            picks = rng.integers(0, flat.size, size=max(1, flat.size // 8))
            flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0], np.float32), size=picks.size)
        xs.append(x)
    return xs


@settings(deadline=None, max_examples=25)
@given(case=cases(), seed=st.integers(0, 2**32 - 1), specials=st.booleans(), half=st.booleans())
@example(case=((2, 7, 16), ((2, 7, 16),), ex.Binary("multiply", ex.Input(0), ex.Binary("divide", clip(0.0, 6.0, ex.Binary("add", ex.Input(0), ex.Const(3.0))), ex.Const(6.0)))),
         seed=1, specials=True, half=False)  # LeViT's HardSwish on tokens, as exported
@example(case=((1, 3, 5, 5), ((1, 3, 5, 5), (5, 5), (3, 1, 1)), ex.Binary("add", ex.Binary("multiply", ex.Input(0), ex.Input(1)), ex.Input(2))),
         seed=2, specials=False, half=True)  # lower ranks broadcast over leading and last axes, scalar loads
def test_fused_elementwise_matches_numpy(device, case, seed, specials, half):
    """Every output element equals float64 NumPy's within float32 rounding (a few ulps per op of the
    chain, relative to the magnitudes it went through) and is NaN exactly where NumPy's is."""
    out_shape, shapes, expr = case
    rng = np.random.default_rng(seed)
    xs = _inputs(rng, shapes, specials)
    if half:
        xs = [x.astype(np.float16).astype(np.float32) for x in xs]
    func = pe.fused_elementwise(out_shape, shapes, expr)
    got = run_kernel(device, func, *xs, poison=12345.0, half=build.ALL_BUFFERS if half else ())
    with np.errstate(all="ignore"):
        ref = np.broadcast_to(reference(expr, [x.astype(np.float64) for x in xs]), out_shape)
        if half:
            ref = np.where(np.isfinite(ref), ref.astype(np.float16).astype(np.float64), ref)  # the store rounds to half
    assert got.shape == out_shape
    assert not np.any(got == 12345.0), "an output element was not written (poison survived)"
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), "NaN where NumPy has none, or none where it has"
    finite = np.isfinite(ref) & np.isfinite(got)
    assert np.array_equal(np.isinf(got) & ~np.isfinite(ref), np.isinf(got) & np.isinf(ref))
    rtol = 2e-3 if half else 1e-4  # exp, erf, pow and tanh are a few ulps in OpenCL; half rounds the output
    err = np.abs(got[finite] - ref[finite])
    bound = rtol * np.maximum(np.abs(ref[finite]), 1.0)
    assert np.all(err <= bound), f"max error {float((err - bound).max()):.3g} over the bound"


def test_fused_elementwise_bad_arguments():
    with pytest.raises(ValueError, match="broadcast"):
        pe.fused_elementwise((2, 3), ((2, 4),), ex.Input(0))
    with pytest.raises(ValueError, match="broadcast"):
        pe.fused_elementwise((2, 3), ((1, 2, 3),), ex.Input(0))
    with pytest.raises(ValueError, match="inputs"):
        pe.fused_elementwise((2, 3), ((2, 3),) * 5, ex.Input(0))
    with pytest.raises(ValueError, match="every one"):
        pe.fused_elementwise((2, 3), ((2, 3), (2, 3)), ex.Unary("exp", ex.Input(0)))
    with pytest.raises(ValueError, match="unknown activation"):
        pe.fused_elementwise((2, 3), ((2, 3),), ex.Unary("swoosh", ex.Input(0)))
    with pytest.raises(ValueError, match="malformed"):
        pe.fused_elementwise((2, 3), ((2, 3),), ex.Binary("add", ex.Input(0), ("in", 0)))
    with pytest.raises(ValueError, match="does not read"):  # an anchor epilogue's leaf
        pe.fused_elementwise((2, 3), ((2, 3),), ex.Binary("add", ex.Input(0), ex.X()))
    with pytest.raises(ValueError, match="lo <= hi"):
        pe.fused_elementwise((2, 3), ((2, 3),), clip(2.0, 1.0, ex.Input(0)))
    with pytest.raises(TypeError, match="dtype"):
        pe.fused_elementwise((2, 3), ((2, 3),), ex.Input(0), dtype="int8")
