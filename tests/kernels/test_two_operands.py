"""Epilogues that read two other activations (issue 34): the conv's direct kernel and the GEMM
take an expression over their value and two operands (each full, per channel or per pixel for the
conv; full for the GEMM), or a residual and one operand. Random inputs against float64 NumPy on
NaN-poisoned outputs, float32 and float16_acc32 (half images and half buffers, float32 kernels:
the inputs are made half-exact, so the output's one rounding to half is the only extra error)."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL, check_blocked_output, from_nchw4c, reference_conv2d, to_nchw4c, to_oihw4o
from helpers.numeric import rand, run_kernel
from primfuncs import conv, epilogue_expr as ex, gemm
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.activation_table import numpy_activation
from primfuncs.epilogue import RESIDUAL, SECOND, Epilogue
from tir_adreno.codegen import build
from tir_adreno.strategy.packing import pack_bias

HALF_RTOL = 2.0**-11  # float16_acc32: the output rounded to half once
PRECISIONS = ("float32", "float16_acc32")


def _expr(first: str, second: str):
    """``(x + operand0) * operand1 - operand0 * c0``: both operands, one read twice, a channel constant."""
    op0, op1 = ex.Operand(first, 0), ex.Operand(second, 1)
    return ex.Binary("subtract", ex.Binary("multiply", ex.Binary("add", ex.X(), op0), op1),
                     ex.Binary("multiply", op0, ex.Channel(0)))


def _inputs(rng, shapes, half):
    """Random arrays of ``shapes``, half-exact under float16_acc32 (their storage rounds nothing)."""
    arrays = [rand(rng, s) for s in shapes]
    return [a.astype(np.float16).astype(np.float32) if half else a for a in arrays]


def _check(got, ref, half):
    assert np.all(np.isfinite(got)), "an output element was not written (poison survived)"
    bound = CONV_RTOL * np.max(np.abs(ref)) + (HALF_RTOL * np.abs(ref) if half else 0.0)
    excess = np.abs(got - ref) - bound
    assert np.all(excess <= 0), f"max error over the bound {float(excess.max()):.3g}"


OPERAND_SHAPES = {"full": lambda n, c, h, w: (n, c, h, w), "channel": lambda n, c, h, w: (n, c, 1, 1),
                  "pixel": lambda n, c, h, w: (n, 1, h, w)}
CONV_CASES = [  # (first kind, second kind, residual, scope, depthwise)
    ("full", "channel", False, TEXTURE, False),
    ("pixel", "full", False, BUFFER, False),
    ("channel", "pixel", False, TEXTURE, True),
    (None, "pixel", True, TEXTURE, False),  # a residual add, then one operand (read from Residual2)
    (None, "full", True, BUFFER, True),
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("first, second, residual, scope, depthwise", CONV_CASES)
@settings(max_examples=max(2, settings().max_examples // 4), deadline=None)  # each example builds a kernel
@given(c=st.sampled_from([4, 6, 9]), o=st.sampled_from([4, 6, 8]), h=st.integers(3, 6), w=st.integers(3, 8),
       seed=st.integers(0, 2**32 - 1))
@example(c=6, o=6, h=5, w=7, seed=0)  # 6 channels: a padded last block (its lanes must stay 0)
def test_direct_conv_reads_two_activations(device, first, second, residual, scope, depthwise, precision, c, o, h, w, seed):
    half = precision == "float16_acc32"
    rng = np.random.default_rng(seed)
    n = 1
    groups = c if depthwise else 1
    o = c if depthwise else o
    if residual:
        expr = ex.Binary("add", ex.Binary("multiply", ex.Unary("tanh", ex.X()), ex.Operand(second, 0)), ex.Channel(0))
        kinds = [("full", RESIDUAL), (second, SECOND)]
    else:
        expr = _expr(first, second)
        kinds = [(first, RESIDUAL), (second, SECOND)]
    epi = Epilogue(bias=True, activation="relu", residual=residual, expr=expr)
    assert epi.reads_second and epi.params(["X", "W"], "Y")[-3:] == [RESIDUAL, SECOND, "Y"]
    x, wt, bias, c0 = _inputs(rng, [(n, c, h, w), (o, c // groups, 3, 3), (o,), (o,)], half)
    extras = _inputs(rng, [OPERAND_SHAPES[kind](n, o, h, w) for kind, _ in kinds], half)
    y = numpy_activation(reference_conv2d(x, wt, (1, 1), (1, 1, 1, 1), (1, 1), groups) + bias.reshape(1, o, 1, 1)
                         + (extras[0] if residual else 0.0), "relu")
    ref = ex.numpy_evaluate(expr, y, operands=extras[1:] if residual else extras, channels=[c0])

    func = conv.conv2d_nchw4c((n, c, h, w), (o, c // groups, 3, 3), padding=1, groups=groups, epilogue=epi,
                              config=conv.ConvConfig(2, 2, (4, 2, 1)), scope=scope)
    inputs = [to_nchw4c(x), to_oihw4o(wt), np.concatenate([pack_bias(bias), pack_bias(c0)], axis=1),
              *[to_nchw4c(e) for e in extras]]
    blocked = run_kernel(device, func, *inputs, storage="float16" if half else None,
                         half=build.ALL_BUFFERS if half else ())
    check_blocked_output(blocked, o)
    _check(from_nchw4c(blocked, o), ref, half)


def _pixels(x):
    """``x`` with its last axis as zero-padded RGBA pixels (texture placement)."""
    out = np.zeros((*x.shape[:-1], -(-x.shape[-1] // 4) * 4), np.float32)
    out[..., : x.shape[-1]] = x
    return out.reshape(*x.shape[:-1], -1, 4)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("residual, scope, tiled", [(False, BUFFER, False), (False, TEXTURE, False), (True, BUFFER, False), (True, TEXTURE, False),
                                                     (False, BUFFER, True), (True, BUFFER, True)])
@settings(max_examples=max(2, settings().max_examples // 4), deadline=None)  # each example builds a kernel
@given(n=st.integers(1, 13), m=st.integers(1, 7), k=st.integers(1, 17), seed=st.integers(0, 2**32 - 1))
@example(n=9, m=5, k=13, seed=0)  # a padded last block of 4 lanes
def test_gemm_reads_two_activations(device, residual, scope, tiled, precision, n, m, k, seed):
    """The register GEMM and (buffers) the local-memory tiled one (``tiled``): an expression
    epilogue reading one or two activations of Y's shape."""
    half = precision == "float16_acc32"
    rng = np.random.default_rng(seed)
    a_shape, b_shape, out_shape = (2, m, k), (k, n), (2, m, n)
    expr = (ex.Binary("add", ex.Binary("multiply", ex.X(), ex.Operand("full", 0)), ex.Unary("sigmoid", ex.Channel(0)))
            if residual else ex.Binary("multiply", ex.Channel(0), ex.Binary("divide", ex.Binary("add", ex.X(), ex.Operand("full", 0)),
                                                                   ex.Binary("add", ex.Unary("abs", ex.Operand("full", 1)), ex.Const(0.5)))))
    epi = Epilogue(bias=residual, residual=residual, expr=expr)
    assert epi.reads_second
    a, b, bias, c0, first, second = _inputs(rng, [a_shape, b_shape, (n,), (n,), out_shape, out_shape], half)
    value = np.asarray(a, np.float64) @ b + (bias + first if residual else 0.0)
    ref = ex.numpy_evaluate(expr, value, operands=[second] if residual else [first, second], channels=[c0], channel_axis=-1)

    func = gemm.gemm(a_shape, b_shape, config=gemm.GemmConfig(2, 2, 2, 4, tiled=tiled, k_chunk=2), epilogue=epi, scope=scope)
    placed = _pixels if scope == TEXTURE else np.asarray
    rows = np.concatenate([pack_bias(bias), pack_bias(c0)], axis=1) if residual else pack_bias(c0)
    got = run_kernel(device, func, placed(a), placed(b), rows, placed(first), placed(second),
                     storage="float16" if half and scope == TEXTURE else None, half=build.ALL_BUFFERS if half else ())
    if scope == TEXTURE:
        got = got.reshape(*got.shape[:-2], -1)
        assert np.all(got[..., n:] == 0), "padding lanes not written 0"
        got = got[..., :n]
    _check(got, ref, half)


def test_kernels_that_read_one_activation_refuse_a_second():
    """The tiled conv, Winograd and the row kernels read one activation: a second is refused, named."""
    from primfuncs import rows
    from primfuncs.conv import winograd

    two = Epilogue(expr=_expr("full", "full"))
    with pytest.raises(ValueError, match="the direct conv and the GEMM read a second"):
        conv.conv2d_nchw4c((1, 8, 6, 6), (8, 8, 1, 1), epilogue=two, config=conv.ConvConfig(1, 4, (8, 2, 1), tiled=True), scope=BUFFER)
    with pytest.raises(ValueError, match="the direct conv and the GEMM read a second"):
        winograd.conv2d_winograd_nchw4c((1, 8, 6, 6), (8, 8, 3, 3), padding=(1, 1, 1, 1), epilogue=two)
    with pytest.raises(ValueError, match="one operand"):
        rows.softmax((2, 8), epilogue=Epilogue(expr=ex.Binary("add", ex.Operand(), ex.Operand("full", 1))))
    with pytest.raises(ValueError, match="operands of the output's shape"):
        gemm.gemm((5, 8), (8, 12), epilogue=Epilogue(expr=ex.Binary("add", ex.Operand(), ex.Operand("pixel", 1))))
    with pytest.raises(ValueError, match="at most 2"):
        Epilogue(residual=True, expr=_expr("full", "full"))
