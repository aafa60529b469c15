"""The plain-buffer elementwise kernel (``primfuncs.plain_elementwise``) against float64 NumPy:
random ranks and broadcast shapes, random expressions over every op and activation of the table,
random inputs with NaN and infinities mixed in, float32 and half buffers (float16_acc32), on
NaN-poisoned outputs (a finite poison where NaN is expected)."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel
from primfuncs import epilogue_expr as ex
from primfuncs import gather as G
from primfuncs import plain_elementwise as pe
from primfuncs.activation_table import TABLE, numpy_activation
from test_gather import PAD
from test_gather import cases as gather_cases
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
    return _unary(expr, reference(expr.arg, xs))


def _unary(expr, x):
    if expr.op in NUMPY_UNARY:
        return NUMPY_UNARY[expr.op](x)
    params = dict(expr.params)
    if expr.op == "clip":
        y = x if params["lo"] is None else np.maximum(x, params["lo"])
        return y if params["hi"] is None else np.minimum(y, params["hi"])
    return numpy_activation(x, expr.op, **params)


#: A float32 op's own error, relative: OpenCL's pow and erf are within 16 ulp (2**-24 each).
OWN_ERROR = 1e-6
#: Ops whose float32 error is relative to their argument, not their value (the activations'
#: ``1 + erf`` and ``1 + exp`` cancel: GELU of -6 is 0 in float32, 1e-8 in float64).
ABSOLUTE_IN_ARGUMENT = {"erf", "tanh"} | set(TABLE)


def bounded(expr, xs):
    """The float64 value of ``expr`` and how far a float32 evaluation may be from it: each op's
    own error plus its arguments' errors carried through it (the op at the corners of their
    intervals). Infinite where float32 rounding can change the answer's kind (a divisor or a
    log's argument whose interval holds 0, an overflow): there the test cannot say."""
    if isinstance(expr, (ex.Input, ex.Const)):
        v = reference(expr, xs)
        return v, np.zeros(np.shape(v))
    if isinstance(expr, ex.Binary):
        (a, ea), (b, eb) = bounded(expr.a, xs), bounded(expr.b, xs)
        f = NUMPY_BINARY[expr.op]
        v = f(a, b)
        spread = _spread(v, [f(a + i * ea, b + j * eb) for i in (-1, 0, 1) for j in (-1, 0, 1)])
        singular = (expr.op == "divide") & _holds_zero(b, eb) | (expr.op == "pow") & _holds_zero(a, ea) & (b < 0)
        singular |= np.isinf(ea) | np.isinf(eb)  # an argument the test cannot say: neither can it of this
        return v, _with_own_error(v, np.where(singular, np.inf, spread), 0.0)
    x, ex_ = bounded(expr.arg, xs)
    v = _unary(expr, x)
    spread = _spread(v, [_unary(expr, x - ex_), _unary(expr, x + ex_)])
    if expr.op == "reciprocal":
        spread = np.where(_holds_zero(x, ex_), np.inf, spread)
    spread = np.where(np.isinf(ex_), np.inf, spread)
    return v, _with_own_error(v, spread, np.abs(x) if expr.op in ABSOLUTE_IN_ARGUMENT else 0.0)


def _holds_zero(x, err):
    return (err > 0) & (np.abs(x) <= err)


def _spread(v, corners):
    """Largest distance from ``v`` to a corner value; inf where one differs in kind (NaN, inf)."""
    out = np.zeros(np.shape(v))
    for c in corners:
        same = (c == v) | (np.isnan(c) & np.isnan(v))
        d = np.where(same, 0.0, np.abs(c - v))
        out = np.maximum(out, np.where(np.isnan(d), np.inf, d))
    return out


def _with_own_error(v, spread, argument_scale):
    finite = np.isfinite(v)
    own = np.where(finite, OWN_ERROR * (np.abs(v) + np.where(finite, argument_scale, 0.0)), 0.0)
    total = spread + own
    return np.where(finite & (np.abs(v) + total > np.finfo(np.float32).max), np.inf, total)


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

    tree = st.recursive(leaf, extend, max_leaves=6).filter(lambda e: not _self_difference(e))
    return tree.map(lambda e: e if reads_all(e) else _with_inputs(e, inputs)).filter(reads_all)


def _self_difference(e):
    """Whether ``e`` holds some ``a - a``: TVM's simplifier folds float algebra as fast-math does
    (``a - a`` to 0, so inf - inf is 0, not NaN; ``test_division_by_a_folded_zero`` has the rest)."""
    if isinstance(e, ex.Binary):
        return e.op == "subtract" and e.a == e.b or _self_difference(e.a) or _self_difference(e.b)
    return isinstance(e, ex.Unary) and _self_difference(e.arg)


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
@example(case=((1, 1, 4), ((1, 1, 4), (1, 1, 1), (1, 1, 1)), ex.Binary("add", ex.Binary("add", ex.Binary("add", ex.Binary("divide", ex.Input(0), ex.Unary("gelu", ex.Input(0))), ex.Input(0)), ex.Input(1)), ex.Input(2))),
         seed=77, specials=False, half=False)  # x / GELU(x): GELU of a large negative x is 0 in float32
@example(case=((2, 3, 8), ((2, 3, 8), (1,), (1, 3, 8)), ex.Binary("add", ex.Binary("add", ex.Binary("add", ex.Unary("log", ex.Binary("divide", ex.Unary("gelu", ex.Input(2)), ex.Unary("gelu", ex.Input(2)))), ex.Input(0)), ex.Input(1)), ex.Input(2))),
         seed=619, specials=True, half=False)  # log(0 / 0) in float32, log(1) in float64
@example(case=((1, 1, 3, 4), ((1, 1, 3, 4), (1, 1, 1, 1), (1, 1, 1, 1)), _with_inputs(ex.Unary("log", ex.Unary("gelu", ex.Input(1), ())), 3)),
         seed=0, specials=False, half=False)  # log(GELU(-7)): -inf in float32, NaN in float64; NaN + x after it (the cannot-say carried)
def test_fused_elementwise_matches_numpy(device, case, seed, specials, half):
    """Every output element equals float64 NumPy's within float32 rounding (``bounded``: each op's
    few ulps carried through the chain) and is NaN exactly where NumPy's is, except where that
    rounding can change the answer's kind (0 / 0 in float32, a finite value in float64)."""
    out_shape, shapes, expr = case
    rng = np.random.default_rng(seed)
    xs = _inputs(rng, shapes, specials)
    if half:
        xs = [x.astype(np.float16).astype(np.float32) for x in xs]
    func = pe.fused_elementwise(out_shape, shapes, expr)
    got = run_kernel(device, func, *xs, poison=12345.0, half=build.ALL_BUFFERS if half else ())
    with np.errstate(all="ignore"):
        ref, slack = (np.broadcast_to(a, out_shape) for a in bounded(expr, [x.astype(np.float64) for x in xs]))
        if half:
            ref = np.where(np.isfinite(ref), ref.astype(np.float16).astype(np.float64), ref)  # the store rounds to half
    assert got.shape == out_shape
    assert not np.any(got == 12345.0), "an output element was not written (poison survived)"
    sure = np.isfinite(slack)  # float32 rounding cannot change NaN-ness, overflow or a divisor's sign
    assert np.array_equal(np.isnan(got)[sure], np.isnan(ref)[sure]), "NaN where NumPy has none, or none where it has"
    inf_got = np.isinf(got) & sure
    assert np.array_equal(inf_got & ~np.isfinite(ref), inf_got & np.isinf(ref)), "an infinity NumPy does not have"
    finite = np.isfinite(ref) & np.isfinite(got) & sure
    rtol = 2e-3 if half else 1e-4  # exp, erf, pow and tanh are a few ulps in OpenCL; half rounds the output
    err = np.abs(got[finite] - ref[finite])
    bound = rtol * np.maximum(np.abs(ref[finite]) + slack[finite], 1.0) + slack[finite]
    assert np.all(err <= bound), f"max error {float((err - bound).max()):.3g} over the bound"


@settings(deadline=None, max_examples=25)
@given(view=gather_cases(), seed=st.integers(0, 2**32 - 1), half=st.booleans(), plain_second=st.booleans())
@example(view=([(1, 4, 4, 24), (1, 4, 4, 8)], lambda xs: np.concatenate([xs[0][..., 16:24], xs[1]], axis=3),
               (G.Source(0, (G.Affine((1, 4, 4, 8), (0, 0, 0, 0), (1, 1, 1, 1)), G.Affine((1, 4, 4, 24), (0, 0, 0, 16), (1, 1, 1, 1)))),
                G.Source(1, (G.Affine((1, 4, 4, 8), (0, 0, 0, -8), (1, 1, 1, 1)),))), (1, 4, 4, 16)),
         seed=3, half=False, plain_second=True)  # MambaOut's cat(i, c): a slice of the Linear's output, then the conv's (vector loads)
def test_operands_read_through_views(device, view, seed, half, plain_second):
    """An operand read through gather sources (``plain_elementwise.View``: slices, transposes, pads,
    tiles, concats, as ``test_gather`` draws them) equals NumPy's movement of the buffers, in an
    expression with a plain operand or the same view again."""
    shapes, fn, sources, out_shape = view
    rng = np.random.default_rng(seed)
    plain_second = plain_second and len(shapes) < G.MAX_INPUTS
    buffers = [rand(rng, s) for s in shapes] + ([rand(rng, out_shape)] if plain_second else [])
    if half:
        buffers = [x.astype(np.float16).astype(np.float32) for x in buffers]
    operands = (pe.View(sources, PAD), len(shapes) if plain_second else pe.View(sources, PAD))
    expr = ex.Binary("add", ex.Binary("multiply", ex.Input(0), ex.Const(2.0)), ex.Unary("neg", ex.Input(1)))
    func = pe.fused_elementwise(out_shape, [b.shape for b in buffers], expr, operands=operands)
    got = run_kernel(device, func, *buffers, poison=12345.0, half=build.ALL_BUFFERS if half else ())
    moved = fn([b.astype(np.float64) for b in buffers[: len(shapes)]])
    ref = moved * 2 - (buffers[-1] if plain_second else moved)
    if half:
        ref = ref.astype(np.float16).astype(np.float64)
    assert got.shape == tuple(out_shape)
    assert not np.any(got == 12345.0), "an output element was not written (poison survived)"
    np.testing.assert_allclose(got, ref, rtol=2e-3 if half else 1e-6, atol=0)


def test_views_take_vector_loads_where_their_sources_are_contiguous():
    """MambaOut's concat of two channel slices (4-aligned) is read 4 elements at a time; a
    transpose of the last axis is not."""
    expr = ex.Binary("multiply", ex.Input(0), ex.Input(1))
    concat = pe.View((G.Source(0, (G.Affine((1, 2, 8), (0, 0, 0), (1, 1, 1)), G.Affine((1, 2, 16), (0, 0, 4), (1, 1, 1)))),
                      G.Source(1, (G.Affine((1, 2, 8), (0, 0, -8), (1, 1, 1)),))))
    assert "T.Ramp" in pe.fused_elementwise((1, 2, 16), [(1, 2, 16), (1, 2, 8)], expr, operands=(concat, 0)).script()
    transposed = pe.View((G.Source(0, (G.Permute((0, 2, 1)),)),))
    script = pe.fused_elementwise((1, 8, 4), [(1, 4, 8)], ex.Unary("neg", ex.Input(0)), operands=(transposed,)).script()
    assert "T.Ramp" not in script


def test_views_bad_arguments():
    with pytest.raises(ValueError, match="reads shape"):
        pe.fused_elementwise((2, 3), ((2, 4),), ex.Input(0), operands=(pe.View((G.Source(0, ()),)),))
    with pytest.raises(ValueError, match="every one of the 2 buffers"):
        pe.fused_elementwise((2, 3), ((2, 3), (2, 3)), ex.Input(0), operands=(0,))
    with pytest.raises(ValueError, match="buffer number"):
        pe.fused_elementwise((2, 3), ((2, 3),), ex.Input(0), operands=(1,))


@pytest.mark.parametrize("divisor", [ex.Const(0.0), ex.Const(-0.0), ex.Binary("subtract", ex.Input(0), ex.Input(0))],
                         ids=["zero", "negative-zero", "self-difference"])
@pytest.mark.parametrize("op", ["divide", "reciprocal"])
def test_division_by_a_folded_zero(device, op, divisor):
    """A divisor TVM simplifies to a zero constant (a graph's ``x / 0``, or ``x / (y - y)``) used to
    stop TVM's constant folder with an internal error; the kernel gives IEEE's answer: +-inf by the
    signs, NaN for 0 / 0 and NaN / 0."""
    x = np.array([3.0, -2.0, 0.0, np.nan, np.inf, -np.inf, 1e-30, -5.0], np.float32)
    if op == "divide":
        expr = ex.Binary("divide", ex.Input(0), divisor)
    else:
        expr = ex.Binary("multiply", ex.Input(0), ex.Unary("reciprocal", divisor))
    got = run_kernel(device, pe.fused_elementwise(x.shape, (x.shape,), expr), x, poison=12345.0)
    zero = np.float32(math.copysign(0.0, divisor.value) if isinstance(divisor, ex.Const) else 0.0)
    with np.errstate(all="ignore"):
        want = x / zero if op == "divide" else x * (np.float32(1) / zero)
    np.testing.assert_array_equal(got, want)


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
