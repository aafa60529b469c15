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
from primfuncs import plain_elementwise as pe
from primfuncs.activation_table import TABLE, numpy_activation
from tir_adreno.codegen import build

#: float64 NumPy of each op (NaN and Inf as NumPy has them).
NUMPY_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
                "maximum": np.maximum, "minimum": np.minimum, "power": np.power}
NUMPY_UNARY = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "negative": np.negative, "abs": np.abs,
               "reciprocal": lambda x: 1.0 / x, "erf": np.vectorize(math.erf, otypes=[np.float64]), "tanh": np.tanh}
#: Parameters drawn for the parametrized activations.
ACT_PARAMS = {"clip": (("lo", -0.5), ("hi", 2.0)), "leaky_relu": (("alpha", 0.2),), "hardsigmoid": (("alpha", 0.25), ("beta", 0.4))}


def reference(expr, xs):
    op, *rest = expr
    if op == "in":
        return xs[rest[0]]
    if op == "const":
        return np.float64(rest[0])
    if op in NUMPY_BINARY:
        return NUMPY_BINARY[op](reference(rest[0], xs), reference(rest[1], xs))
    if op in NUMPY_UNARY:
        return NUMPY_UNARY[op](reference(rest[0], xs))
    if op == "clip":
        y = reference(rest[2], xs)
        y = y if rest[0] is None else np.maximum(y, rest[0])
        return y if rest[1] is None else np.minimum(y, rest[1])
    name, params, x = rest
    return numpy_activation(reference(x, xs), name, **dict(params))


def exprs(inputs: int):
    """Random expressions reading inputs ``0..inputs-1`` (each at least once: the leaves cycle)."""
    leaf = st.one_of(st.builds(lambda i: ("in", i), st.integers(0, inputs - 1)),
                     st.builds(lambda v: ("const", v), st.sampled_from([2.0, 3.0, 0.5, -1.0, 1.5, 6.0])))
    acts = st.sampled_from(sorted(TABLE)).map(lambda n: (n, ACT_PARAMS.get(n, ())))

    def extend(child):
        return st.one_of(st.tuples(st.sampled_from(sorted(NUMPY_BINARY)), child, child),
                         st.tuples(st.sampled_from(sorted(NUMPY_UNARY)), child),
                         st.tuples(st.just("clip"), st.sampled_from([None, -1.0]), st.sampled_from([None, 1.0]), child),
                         acts.flatmap(lambda a: st.tuples(st.just("act"), st.just(a[0]), st.just(a[1]), child)))

    def reads_all(e):
        return pe.check_expr(e, inputs) == set(range(inputs))

    tree = st.recursive(leaf, extend, max_leaves=6)
    return tree.map(lambda e: e if reads_all(e) else _with_inputs(e, inputs)).filter(reads_all)


def _with_inputs(e, inputs):
    for i in range(inputs):
        e = ("add", e, ("in", i))
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
@example(case=((2, 7, 16), ((2, 7, 16),), ("multiply", ("in", 0), ("divide", ("clip", 0.0, 6.0, ("add", ("in", 0), ("const", 3.0))), ("const", 6.0)))),
         seed=1, specials=True, half=False)  # LeViT's HardSwish on tokens, as exported
@example(case=((1, 3, 5, 5), ((1, 3, 5, 5), (5, 5), (3, 1, 1)), ("add", ("multiply", ("in", 0), ("in", 1)), ("in", 2))),
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
        pe.fused_elementwise((2, 3), ((2, 4),), ("in", 0))
    with pytest.raises(ValueError, match="broadcast"):
        pe.fused_elementwise((2, 3), ((1, 2, 3),), ("in", 0))
    with pytest.raises(ValueError, match="inputs"):
        pe.fused_elementwise((2, 3), ((2, 3),) * 5, ("in", 0))
    with pytest.raises(ValueError, match="every one"):
        pe.fused_elementwise((2, 3), ((2, 3), (2, 3)), ("exp", ("in", 0)))
    with pytest.raises(ValueError, match="unknown activation"):
        pe.fused_elementwise((2, 3), ((2, 3),), ("act", "swoosh", (), ("in", 0)))
    with pytest.raises(ValueError, match="malformed"):
        pe.fused_elementwise((2, 3), ((2, 3),), ("add", ("in", 0)))
    with pytest.raises(ValueError, match="lo <= hi"):
        pe.fused_elementwise((2, 3), ((2, 3),), ("clip", 2.0, 1.0, ("in", 0)))
    with pytest.raises(TypeError, match="dtype"):
        pe.fused_elementwise((2, 3), ((2, 3),), ("in", 0), dtype="int8")
