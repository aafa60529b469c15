"""The row kernels with an expression epilogue (the ``epilogue`` of ``primfuncs.rows``' layer norm,
RMS norm, softmax and per-channel affine: an elementwise chain after them, issue 34) against float64
NumPy: random expressions (unary ops and activations, binary ops with a scalar, a per-channel constant along the
last axis or an operand of the output's shape), random shapes and axes, float32 and float16_acc32
(the float32 kernel on half buffers), on NaN-poisoned outputs."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.numeric import as_read, rand, run_kernel
from primfuncs import epilogue_expr as ex
from primfuncs import rows
from primfuncs.epilogue import Epilogue
from tir_adreno.codegen import build
from tir_adreno.strategy.packing import pack_bias

U32 = 2.0**-24  # float32 unit roundoff
HALF_RTOL = 2.0**-11  # float16_acc32: the output rounded to half once
#: unary steps whose slope is at most ~1.2 (the error bound below stays the norm's own)
UNARY = ("tanh", "sigmoid", "relu", "abs", "neg", "erf", "gelu", "silu", "hardswish")


@st.composite
def expressions(draw, depth=3):
    """A random expression over the norm's value: 1-``depth`` steps, each a unary op, an activation
    with parameters, or a binary op of the value so far and a scalar, a per-channel constant or the
    operand (either side, divide only by a constant away from 0)."""
    e, channels = ex.X(), 0
    for _ in range(draw(st.integers(1, depth))):
        kind = draw(st.sampled_from(["unary", "leaky", "binary", "binary", "pow"]))
        if kind == "unary":
            e = ex.Unary(draw(st.sampled_from(UNARY)), e)
        elif kind == "leaky":
            e = ex.Unary("leaky_relu", e, (("alpha", draw(st.sampled_from([0.1, 0.3]))),))
        elif kind == "pow":
            e = ex.Binary("pow", ex.Unary("tanh", e), ex.Const(draw(st.sampled_from([2.0, 3.0]))))
        else:
            op = draw(st.sampled_from(["add", "subtract", "multiply", "divide", "maximum", "minimum"]))
            leaf = draw(st.sampled_from(["const", "channel", "operand"] if op != "divide" else ["const"]))
            if leaf == "const":
                other = ex.Const(draw(st.sampled_from([0.5, -1.25, 2.0])))
            elif leaf == "channel":
                other, channels = ex.Channel(channels), channels + 1
            else:
                other = ex.Operand("full")
            e = ex.Binary(op, e, other) if op == "divide" or draw(st.booleans()) else ex.Binary(op, other, e)
    return e


@st.composite
def shapes_and_axis(draw):
    """(shape, axis): rank 1-4, the last axis 1-37 (a padded block of 4 channels), the normalized ones
    up to ~300 elements."""
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(rank - 1)] + [draw(st.sampled_from([1, 3, 4, 6, 37]))]
    return tuple(shape), draw(st.integers(-rank, -1))


def _view(shape, axis):
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return view


def _kernel(name, shape, axis, threads, epilogue, rng):
    """(the kernel, its own inputs but X, its float64 reference of the stored inputs ``f(x, params)``)."""
    if name in ("layer_norm", "rms_norm"):
        rms, axes = name == "rms_norm", tuple(range(axis, len(shape)))
        params = [rand(rng, shape[axis:]) for _ in range(1 if rms else 2)]

        def ref(x, p):
            if rms:
                return x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + 1e-5) * p[0]
            return (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-5) * p[0] + p[1]
        return rows.layer_norm(shape, axis, 1e-5, threads=threads, rms=rms, epilogue=epilogue), params, ref
    if name == "softmax":
        def ref(x, p):
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)
        return rows.softmax(shape, axis, threads=threads, epilogue=epilogue), [], ref
    params = [rand(rng, (shape[axis],)) for _ in range(2)]
    return rows.channel_affine(shape, axis, epilogue=epilogue), params, lambda x, p: x * p[0].reshape(_view(shape, axis)) + p[1].reshape(
        _view(shape, axis))


@given(case=shapes_and_axis(), expr=expressions(), kernel=st.sampled_from(["layer_norm", "rms_norm", "softmax", "affine"]),
       threads=st.sampled_from([1, 4, 32, 64]), precision=st.sampled_from(["float32", "float16_acc32"]), seed=st.integers(0, 2**32 - 1))
@example(case=((1, 197, 37), -1), expr=ex.Binary("add", ex.Binary("multiply", ex.X(), ex.Channel(0)), ex.Operand("full")),
         kernel="layer_norm", threads=64, precision="float32", seed=1)  # a ViT's layer scale and residual after its norm
@example(case=((2, 3, 6), -2), expr=ex.Unary("gelu", ex.Binary("add", ex.Channel(1), ex.Binary("multiply", ex.Channel(0), ex.X()))),
         kernel="rms_norm", threads=4, precision="float16_acc32", seed=2)  # an affine then GELU after an RMS norm
@example(case=((2, 5, 6), 1), expr=ex.Binary("multiply", ex.Operand("full"), ex.Binary("subtract", ex.X(), ex.Channel(0))),
         kernel="softmax", threads=4, precision="float32", seed=3)  # strided rows, the channel the LAST axis
@example(case=((5, 7), 0), expr=ex.Unary("hardswish", ex.Binary("add", ex.X(), ex.Channel(0))), kernel="affine", threads=1,
         precision="float16_acc32", seed=4)  # a batch norm on tokens, a bias, an activation
def test_row_kernel_expression_epilogue(device, case, expr, kernel, threads, precision, seed):
    """``expr(kernel(X))`` (per-channel constants of the last axis, ``(C/4, 4)`` a row as ``pack_rows``
    packs them; the operand of Y's shape) within the norm's float32 error (``(length + 16) 4 u``, as
    ``test_rows``) of the largest value (the values are O(1): the error is absolute), plus half's
    rounding of the output under float16_acc32, on a poisoned Y."""
    shape, axis = case
    axis %= len(shape)
    half = precision == "float16_acc32"
    rng = np.random.default_rng(seed)
    epilogue = Epilogue(expr=expr)
    func, params, reference = _kernel(kernel, shape, axis, threads, epilogue, rng)
    x = rand(rng, shape)
    channels = [rand(rng, (shape[-1],)) for _ in range(ex.channel_count(expr))]
    operand = rand(rng, shape)
    inputs = [x, *params]
    if channels:
        inputs.append(np.concatenate([pack_bias(c) for c in channels], axis=1))
    if epilogue.operand_kinds:
        inputs.append(operand)
    got = run_kernel(device, func, *inputs, half=build.ALL_BUFFERS if half else ())
    assert np.all(np.isfinite(got)), "an output element was not written (poison survived)"
    value = reference(as_read(x, half), [as_read(p, half) for p in params])
    ref = ex.numpy_evaluate(expr, value, operands=[as_read(operand, half)], channels=[as_read(c, half) for c in channels], channel_axis=-1)
    length = int(np.prod(shape[axis:])) if kernel != "softmax" else shape[axis]
    scale = max(float(np.max(np.abs(ref))), 1.0)
    bound = ((length + 16) * 4 * U32 + (2 * HALF_RTOL if half else 0.0)) * scale
    assert np.max(np.abs(got - ref)) <= bound, (f"max error {float(np.max(np.abs(got - ref))):.3g} > {bound:.3g}", ex.describe(expr))


def test_the_row_epilogue_is_an_expression_alone():
    """A bias, residual, activation or plain layout is no row kernel's; an operand is of Y's shape."""
    x = ex.Binary("add", ex.X(), ex.Const(1.0))
    for bad in (Epilogue(bias=True, expr=x), Epilogue(activation="relu", expr=x), Epilogue(residual=True), Epilogue()):
        for factory in (rows.layer_norm, rows.softmax, lambda shape, epilogue: rows.channel_affine(shape, 1, epilogue=epilogue)):
            with pytest.raises(ValueError, match="expression alone"):
                factory((2, 8), epilogue=bad)
    with pytest.raises(ValueError, match="operand of the output's shape"):
        rows.layer_norm((1, 2, 3, 4), epilogue=Epilogue(expr=ex.Binary("add", ex.X(), ex.Operand("pixel"))))
    with pytest.raises(TypeError, match="Epilogue"):
        rows.layer_norm((2, 8), epilogue=x)


def test_the_epilogue_adds_only_the_buffers_it_reads():
    """Parameters ``X, Gamma, [Beta], [Bias], [Residual], Y``: constants and operand only when read."""
    names = lambda f: [p.name for p in f.params]  # noqa: E731
    channel, operand = ex.Binary("multiply", ex.X(), ex.Channel(0)), ex.Binary("add", ex.X(), ex.Operand())
    assert len(names(rows.layer_norm((2, 8), epilogue=Epilogue(expr=ex.Unary("tanh", ex.X()))))) == 4
    assert len(names(rows.layer_norm((2, 8), epilogue=Epilogue(expr=channel)))) == 5
    assert len(names(rows.layer_norm((2, 8), rms=True, epilogue=Epilogue(expr=ex.Binary("add", channel, ex.Operand()))))) == 5
    assert len(names(rows.layer_norm((2, 8), epilogue=Epilogue(expr=operand)))) == 5
    assert names(rows.softmax((2, 8), epilogue=Epilogue(expr=operand))) == ["X", "Residual", "Y"]
    assert names(rows.channel_affine((2, 8), 0, epilogue=Epilogue(expr=channel))) == ["X", "Gamma", "Beta", "Bias", "Y"]
    for factory, symbol in ((lambda e: rows.layer_norm((2, 8), rms=True, epilogue=e), "rms_norm_rows"),
                            (lambda e: rows.layer_norm((2, 8), epilogue=e), "layer_norm_rows"),
                            (lambda e: rows.softmax((2, 8), epilogue=e), "softmax_rows"),
                            (lambda e: rows.channel_affine((2, 8), 0, epilogue=e), "channel_affine")):
        assert factory(Epilogue(expr=operand)).attrs["global_symbol"] == symbol
