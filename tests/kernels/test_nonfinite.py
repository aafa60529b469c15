"""NaN and +-Inf behave as in NumPy (float64 references) for every op family and strategy.

Inputs are random normals with NaN, +Inf and -Inf at random positions of their first
half (so the other half keeps some outputs finite). Outputs are poisoned with a
finite value (the usual NaN poison could pass for a propagated NaN) and checked
fully written. ``np.testing`` compares NaN positions, +-Inf positions and signs, and
the finite values.
"""

import numpy as np
import pytest

from helpers.conv import ALGORITHM_RTOL
from helpers.nonfinite import assert_matches, nonfinite, run_finite_poison
from helpers.numeric import pack_nchw4c, pack_oihw4o, rand, unpack_nchw4c
from helpers.strategies import STRATEGIES

from primfuncs import conv, elementwise, pool2d, reduce
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.epilogue import Epilogue
from tir_adreno.reference import adaptive_pool2d as adaptive_reference
from tir_adreno.reference import conv2d_epilogue as reference_epilogue
from tir_adreno.reference import conv2d_nchw as reference_conv2d
from tir_adreno.reference import pool2d as pool_reference
from tir_adreno.reference import reduce as reduce_reference
from tir_adreno import ops
from tir_adreno.strategy.packing import pack_bias

# The float64 references compute inf - inf and friends on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
SCOPES = [TEXTURE, BUFFER]


# -- elementwise: standalone kernels ----------------------------------------------------------
ELEMENTWISE = {
    "relu": (elementwise.relu, lambda x, y: np.maximum(x, 0)),
    "relu6": (elementwise.relu6, lambda x, y: np.clip(x, 0, 6)),
    "clip": (lambda s, **k: elementwise.clip(s, -0.5, 1.25, **k), lambda x, y: np.clip(x, -0.5, 1.25)),
    "add": (elementwise.add, np.add),
    "multiply": (elementwise.multiply, np.multiply),
}


@pytest.mark.parametrize(
    "op, scope",
    [("relu", TEXTURE), ("relu", BUFFER), ("relu6", TEXTURE), ("relu6", BUFFER), ("clip", TEXTURE),
     ("clip", BUFFER), ("add", TEXTURE), ("multiply", BUFFER)],
)
def test_elementwise(device, op, scope):
    rng = np.random.default_rng(1)
    shape = (2, 2, 3, 5, 4)
    x, y = nonfinite(rng, shape, 9, scale=4.0), nonfinite(rng, shape, 9)  # scale 4: past relu6's 6
    factory, reference = ELEMENTWISE[op]
    func = factory(shape, scope=scope)
    inputs = [x, y] if len(func.params) == 3 else [x]
    assert_matches(run_finite_poison(device, func, *inputs), reference(x.astype(np.float64), y.astype(np.float64)))


# -- conv + fused relu/relu6 (direct, depthwise) ----------------------------------------------
@pytest.mark.parametrize(
    "depthwise, activation, scope",
    [(False, "relu", TEXTURE), (False, "relu6", BUFFER), (True, "relu6", TEXTURE), (True, "relu", BUFFER)],
)
def test_conv2d_fused_activation(device, depthwise, activation, scope):
    """A NaN in a window gives NaN after relu/relu6 (fmax would give 0); an Inf gives Inf or 0/6."""
    rng = np.random.default_rng(2)
    x = nonfinite(rng, (1, 6, 6, 7), 4)
    w = rand(rng, (6, 1, 3, 3) if depthwise else (5, 6, 3, 3))
    bias = rand(rng, (w.shape[0],))
    epilogue = Epilogue(bias=True, activation=activation)
    factory = conv.depthwise_conv2d_nchw4c if depthwise else conv.conv2d_nchw4c
    func = factory(x.shape, w.shape, padding=1, epilogue=epilogue, scope=scope)
    y = run_finite_poison(device, func, pack_nchw4c(x), pack_oihw4o(w), pack_bias(bias))
    groups = x.shape[1] if depthwise else 1
    ref = reference_epilogue(reference_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), groups), bias, None, activation)
    assert_matches(unpack_nchw4c(y, w.shape[0]), ref, rtol=1e-4)
    # The padding lanes of the last block stay 0 although the windows hold NaN/Inf (the next
    # conv and Winograd's GEMM read them against zero weights: NaN * 0 would spread).
    padding = np.moveaxis(y, 4, 2).reshape(y.shape[0], -1, *y.shape[2:4])[:, w.shape[0]:]
    assert padding.size and np.all(padding == 0)


# -- Winograd: the NaN spread is the tiles whose input windows hold a non-finite input ------------
def tile_spread(bad_input, m, out_hw):
    """Outputs of the m x m tiles (padding 1) whose (m+2) x (m+2) input window holds a True of
    ``bad_input`` (N, C, H, W): where Winograd F(m x m, 3 x 3) may turn a non-finite input."""
    bad = np.pad(bad_input.any(axis=1), ((0, 0), (1, m + 1), (1, m + 1)))  # any channel feeds every output
    out = np.zeros((bad.shape[0],) + tuple(-(-d // m) * m for d in out_hw), bool)
    for i in range(0, out.shape[1], m):
        for j in range(0, out.shape[2], m):
            out[:, i : i + m, j : j + m] = bad[:, i : i + m + 2, j : j + m + 2].any(axis=(1, 2))[:, None, None]
    return out[:, None, : out_hw[0], : out_hw[1]]


@pytest.mark.parametrize("m, activation", [(2, None), (4, None), (2, "relu")])
def test_winograd_nonfinite(device, m, activation):
    """Every output whose window holds a NaN/Inf is non-finite (NaN where NumPy says NaN); the
    spread stays inside the affected tiles; the other outputs match. F(2x2) with NaN inputs
    matches NumPy's NaN positions exactly (its transforms' zeros confine a tap to its 3x3
    window); an Inf gives mostly NaN instead of +-Inf (Inf - Inf in the output transform)."""
    rng = np.random.default_rng(3)
    x = nonfinite(rng, (1, 5, 9, 10), 3)
    if activation:  # relu keeps NaN, maps -Inf to 0: NaN inputs only, then the positions match
        x[~np.isfinite(x)] = np.nan
    w, bias = rand(rng, (6, 5, 3, 3)), rand(rng, (6,))
    y = ops.conv2d(x, w, bias, padding=1, activation=activation, algorithm=f"winograd_{m}x{m}", device=device)
    ref = reference_epilogue(reference_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), bias, None, activation)
    assert np.all(np.isnan(y[np.isnan(ref)])) and np.all(~np.isfinite(y[np.isinf(ref)]))
    bad = ~np.isfinite(y)
    spread = tile_spread(~np.isfinite(x), m, y.shape[2:])
    assert not np.any(bad & ~spread), "a non-finite output outside the tiles holding a non-finite input"
    if m == 4:  # documented: F(4x4) spreads wider than the window (the whole tile)
        assert bad.sum() > (~np.isfinite(ref)).sum()
    if activation:  # F(2x2), NaN inputs: exactly NumPy's NaN positions
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    finite = ~bad
    rtol = ALGORITHM_RTOL[f"winograd_{m}x{m}"]  # measured: helpers.conv
    np.testing.assert_allclose(y[finite], ref[finite], rtol=0, atol=rtol * np.abs(ref[finite]).max())


# -- pooling, both strategies -----------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("scope", SCOPES)
def test_max_pool2d(device, strategy, scope):
    """np.max over each window: a NaN tap wins wherever it is; padding is -inf, never NaN."""
    x = nonfinite(np.random.default_rng(4), (1, 6, 7, 8), 8)
    func = pool2d.max_pool2d(pack_nchw4c(x).shape, 3, 2, 1, strategy=strategy, scope=scope)
    y = unpack_nchw4c(run_finite_poison(device, func, pack_nchw4c(x)), x.shape[1])
    assert_matches(y, pool_reference(x, "max", (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_adaptive_and_avg_pool2d(device, strategy, pool_type):
    """Adaptive max propagates NaN like max_pool2d; averages propagate NaN and Inf arithmetically."""
    x = nonfinite(np.random.default_rng(5), (1, 6, 7, 8), 6)
    shape = pack_nchw4c(x).shape
    if pool_type == "max":
        func, ref = pool2d.adaptive_max_pool2d(shape, (3, 2), strategy=strategy), adaptive_reference(x, "max", (3, 2))
    else:
        func = pool2d.avg_pool2d(shape, 3, 1, 1, strategy=strategy)
        ref = pool_reference(x, "avg", (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, False)
    y = unpack_nchw4c(run_finite_poison(device, func, pack_nchw4c(x)), x.shape[1])
    assert_matches(y, ref, rtol=1e-5)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ops_max_pool_and_max(device, strategy):
    """The NCHW ops (layout kernels around the pool/reduction) with the strategy forced."""
    x = nonfinite(np.random.default_rng(8), (1, 5, 6, 7), 5)
    y = ops.max_pool2d(x, (2, 3), (2, 2), (0, 1), strategy=strategy, device=device)
    assert_matches(y, pool_reference(x, "max", (2, 3), (2, 2), (0, 1, 0, 1), (1, 1), False, False))
    assert_matches(ops.max(x, axis=(1, 3), strategy=strategy, device=device), reduce_reference(x, "max", (1, 3), False))


# -- reductions and softmax -------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    "op, axis, scope", [("max", (2, 3), TEXTURE), ("min", (1,), BUFFER), ("sum", (1, 2, 3), TEXTURE),
                        ("mean", (2, 3), BUFFER)],
)
def test_reduce(device, strategy, op, axis, scope):
    """max/min propagate NaN (np.max); sum/mean propagate NaN, and Inf - Inf is NaN. Padded
    channel lanes hold NaN: a channel reduction must exclude them."""
    x = nonfinite(np.random.default_rng(6), (2, 7, 4, 5), 6)
    packed = pack_nchw4c(x, pad_value=np.nan)
    func = reduce.reduce(packed.shape, x.shape[1], op, axis, keepdims=False, scope=scope, strategy=strategy)
    assert_matches(run_finite_poison(device, func, packed), reduce_reference(x, op, axis, False), rtol=1e-5)


@pytest.mark.parametrize("scope", SCOPES)
def test_softmax(device, scope):
    """A channel vector holding a NaN or a +Inf is all NaN (exp(x - max) / sum, as NumPy); one
    holding -Inf gives 0 there and finite values elsewhere."""
    x = nonfinite(np.random.default_rng(7), (1, 6, 3, 4), 6)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    y = run_finite_poison(device, reduce.softmax(pack_nchw4c(x).shape, x.shape[1], scope=scope), pack_nchw4c(x))
    assert_matches(unpack_nchw4c(y, x.shape[1]), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
